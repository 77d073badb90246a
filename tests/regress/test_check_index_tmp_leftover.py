"""Regression: a `*.tmp` left in index/ by an interrupted index file creation made
`core.fsck.check` (and `mqstore check`) fail with a ValueError traceback ("unexpected file ...
in the index directory"): the key check loaded the index through IndexService.load, whose
read-only FileOps keeps leftovers and then refuses their names. The loader deletes such a
leftover (DESIGN.md section 4), so a check notes it and checks the index as the store loads it."""
import os

from core import fsck


def test_check_notes_an_index_tmp_leftover_and_checks_the_index(tiny_config, written_store):
    cfg = tiny_config(mapped_file_size_commitlog=4096, mapped_file_size_consume_queue=200,
                      max_index_num=64)
    written_store(cfg, 60)
    leftover = os.path.join(cfg.index_dir, "20991231000000000.tmp")
    with open(leftover, "wb") as f:
        f.write(b"half")

    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert report.ok, report.format_text()
    assert report.stats["keys_checked"] == 60
    assert any(leftover in n for n in report.notes), report.notes
    assert os.path.exists(leftover)                        # a check changes nothing

    fsck.run_recovery(cfg)
    assert not os.path.exists(leftover)
    assert fsck.check(cfg.store_path_root_dir, config=cfg).ok
