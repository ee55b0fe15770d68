"""The node's tables: topics, consumer offsets, subscription groups (JSON files written
atomically, `jsonfile`), and the live consumers and producers; `changes` is the version
counter the topic table bumps so registration and routing wait on it instead of polling."""
