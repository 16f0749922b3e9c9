"""The command line behind starter.py: a module per command group (jobs, evidence, servers, tenants, gc) and
what it prints (output). Each group adds its commands with `add_commands`; starter.py parses and dispatches."""
