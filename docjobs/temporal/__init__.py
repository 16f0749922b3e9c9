"""The Temporal side of docjobs: connecting (settings, data converter, payload codec, dev server), the job client
(submit and status, visibility listings, exports and evidence, history), and the metric runtime and job gauges.

Everything here may import the core (docjobs.*) and the workflow; nothing in the core imports this package.
"""
