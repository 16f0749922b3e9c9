"""PDF work on files and bytes, free of any Temporal dependency so it can be tested alone.

Importing the package loads nothing: each module is imported where it is used (raster mode, for one,
brings subprocess, pikepdf and PIL).
"""
