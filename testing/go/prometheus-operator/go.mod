// The Prometheus Operator release whose CRDs (example/prometheus-operator-crd) the real cluster
// serves, so that the chart's PodMonitor, ServiceMonitor and PrometheusRule can be installed on it.
// v0.93.0: newer tags answer 403 from the module proxy here. Nothing is built from it.
module multinode-llm.local/prometheus-operator

go 1.26

require github.com/prometheus-operator/prometheus-operator v0.93.0
