"""The record format, once (DESIGN.md sections 1 and 3):

    layout        the header's fields, spelled once; structs, dtypes and positions derived
    message       Message, MessageExt, hosts, message ids
    props         the property string: its one builder, and the parts dispatch reads
    codec         prepare and write a record; the one checking parser (`parse_record`,
                  `check_record`: recovery, dispatch, `mqstore check`, the Spark reader)
    encode        `encode_record`: the one entry for a single message
    batch_encode  `encode_batch`: the one entry for a batch (columns, or record by record)
    decode        the one lazy record view (LazyMessageExt; the client's ReceivedMessage)
    split         a pull reply's frame split into views
    scan          the dispatcher's scanner over a segment's records (scan_batch: its output)
    stop          `Stop`: why a walk over records stopped
    crc, body_crc, crc_property, hashing, key_block: CRCs, Java hash codes, UNIQ_KEY blocks
"""
