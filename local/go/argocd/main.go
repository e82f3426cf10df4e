// Argo CD's application controller, repo server and git ask-pass helper, picked by argv[0] (or
// ARGOCD_BINARY_NAME) as Argo CD's own multi-call binary (cmd/main.go) picks them.
package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	gitaskpass "github.com/argoproj/argo-cd/v3/cmd/argocd-git-ask-pass/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
)

func main() {
	name := filepath.Base(os.Args[0])
	if env := os.Getenv("ARGOCD_BINARY_NAME"); env != "" {
		name = env
	}
	var command *cobra.Command
	switch name {
	case "argocd-repo-server":
		command = reposerver.NewCommand()
	case "argocd-git-ask-pass":
		command = gitaskpass.NewCommand()
	default:
		command = appcontroller.NewCommand()
	}
	if err := command.Execute(); err != nil {
		os.Exit(1)
	}
}
