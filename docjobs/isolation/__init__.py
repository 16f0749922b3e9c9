"""Where tenants' bytes are parsed: confined child processes. On the worker's side, `child_pool` (a pool of children
forked from a zygote), `tenant_pools` (one pool per tenant), `zygote` (starting the zygote and asking it for children)
and `child_process` (one child's pipes and messages); `sandbox_child` (the zygote and its children,
`python -P -m docjobs.isolation.sandbox_child`),
`protocol` (the messages between them), `confine` (bubblewrap and seccomp), `landlock` (each child's file-system
restriction) and `stage_work` (the document work of each stage, run inside a child).

Importing the package loads nothing: the zygote imports it, and must stay small.
"""
