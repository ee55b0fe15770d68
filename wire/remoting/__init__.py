"""RocketMQ 4.x's remoting protocol (`RemotingCommand`), sans-IO: what RocketMQ's own Java,
C++ and Go clients speak. The node and the name server answer it on their client ports
beside tidemq's CBOR protocol (docs/remoting.md)."""
