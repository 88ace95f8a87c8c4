"""The run folder's life: execute the notebooks into it, read it safely, sanitize what it shows."""
