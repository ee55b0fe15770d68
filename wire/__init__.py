"""The client protocol that node/ serves and cluster/ speaks: framing (`framing`), the
connection and pool (`client`), typed requests and replies (`protocol`), the login exchange
(`protocol.auth`, `credentials`) and TLS (`tls`). The network seam it dials through is
ha/net.py, one layer down, because replication dials through it too."""
