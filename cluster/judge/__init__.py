"""The one judge of what a cluster promised: `history` records every send and delivery,
`checker` says what was lost, duplicated or acknowledged against the mode's promise. The
drills (cluster/drills) and the chaos suite and simulation (chaos/) both use it, so it sits
below them both."""
