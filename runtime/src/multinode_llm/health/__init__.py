"""Health: the supervisors' status endpoints and the `probe` command for exec probes."""
