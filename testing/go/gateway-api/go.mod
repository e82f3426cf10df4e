// The Gateway API release whose CRDs the chart's HTTPRoute is checked against: its standard
// channel (config/crd/standard), read from the module's files. Nothing is built from it.
module multinode-llm.local/gateway-api

go 1.26

require sigs.k8s.io/gateway-api v1.6.3
