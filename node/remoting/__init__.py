"""RocketMQ's remoting protocol on the client port: the channel a remoting client holds
(channel.py) and the node's processor table (processor.py), which answers RocketMQ's
request codes from the same tables and store as the CBOR ops (docs/remoting.md)."""
