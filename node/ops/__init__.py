"""The client protocol's operations, by concern: one validated Request in, one response map
out. `services` (what they act on), `puts` (the send pipeline), `pulls` (reads and consumer
offsets), `admin` (mqadmin's ops), `consumers` (group membership, send-back), and
`dispatch` (the op table the server calls)."""
