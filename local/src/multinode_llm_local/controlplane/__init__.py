"""The real Kubernetes control plane under the local cluster: built from Go modules, run here."""
