"""The store's metadata files under `config/`: topics, consumer offsets, consumer groups, and what a
master gives its slaves of them."""
