"""`tidemq console`: a web console over a running cluster (issue 47, docs/console.md).

An ASGI app (Starlette) served by hypercorn's trio worker, in the same trio world as the
client library: it talks to the cluster only through `cluster.client` (Admin, Producer),
never by reading store files. Pages are rendered on the server (Jinja2); their live parts
are htmx fragments. Front-end packages come from the npm registry at install time
(`tidemq console --install-assets`, assets.py) and are served locally, never from a CDN.

- assets.py: fetch and locate the front-end packages (htmx, uPlot)
- inputs.py: what the pages take, checked (InputError: the sentence a page shows)
- brokers.py, topics.py, consumers.py, messages.py, dlq.py, dashboard.py, failover.py:
  what each page shows and changes, through Admin, Producer and PullConsumer
- app.py: routes, templates, signed sessions and CSRF
- server.py: hypercorn under trio, the Admin and Producer the app shares
- cli.py: `tidemq console ...`
"""
