"""The Ray group: the head and worker supervisors that KServe's pods run."""
