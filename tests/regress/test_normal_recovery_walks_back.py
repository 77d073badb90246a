"""Regression: after a clean shutdown, damage that reaches the start of the third segment from
the end used to leave older zeroed bytes counted as log (normal recovery trusted everything
before that segment). It now walks back to a segment that begins with a valid record."""
import os

from core import Message, MessageStore


def test_cut_at_the_start_of_the_normal_scan_window(tiny_config):
    cfg = tiny_config()
    st = MessageStore(cfg)
    st.load()
    st.start()
    for i in range(400):
        assert st.put_message(Message(topic="T", body=b"x" * 200, keys=f"k{i}")).ok
    st.shutdown()
    names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit())
    assert len(names) >= 5
    victim = names[len(names) - 3]
    seg = cfg.mapped_file_size_commitlog
    for name in names[names.index(victim) - 1:]:                 # zero from one segment earlier
        with open(os.path.join(cfg.commitlog_dir, name), "r+b") as f:
            f.write(bytes(seg))
    st = MessageStore(cfg)
    st.load()
    try:
        assert st.get_max_phy_offset() == int(names[names.index(victim) - 1])
    finally:
        st.shutdown()
