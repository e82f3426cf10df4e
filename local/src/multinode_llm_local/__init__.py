"""The local cluster: the chart's rendered pods run as processes in network namespaces."""
