// Command llmisvc-presets runs KServe's own merge of an LLMInferenceService with presets, the code
// its llmisvc controller runs before it builds the service's LeaderWorkerSet: MergeSpecs and
// ReplaceVariables (pkg/controller/v1alpha2/llmisvc/config_merge.go at the release go.mod pins).
//
//	llmisvc-presets [-tls] SERVICE.yaml PRESET.yaml...
//
// It prints, as JSON, the merged config with KServe's template executed (spec.template is each
// group's leader, spec.worker its workers) and the group size KServe gives the LeaderWorkerSet.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/kserve/kserve/pkg/apis/serving/v1alpha2"
	"github.com/kserve/kserve/pkg/controller/v1alpha2/llmisvc"
)

type result struct {
	Config    *v1alpha2.LLMInferenceServiceConfig `json:"config"`
	GroupSize *int32                              `json:"groupSize"`
}

func main() {
	tls := flag.Bool("tls", false, "KServe's EnableTLS (ingress enableLLMInferenceServiceTLS)")
	flag.Parse()
	if flag.NArg() < 2 {
		fail(fmt.Errorf("usage: llmisvc-presets [-tls] SERVICE.yaml PRESET.yaml..."))
	}
	service := &v1alpha2.LLMInferenceService{}
	read(flag.Arg(0), service)
	specs := make([]v1alpha2.LLMInferenceServiceSpec, 0, flag.NArg())
	for _, path := range flag.Args()[1:] {
		preset := &v1alpha2.LLMInferenceServiceConfig{}
		read(path, preset)
		specs = append(specs, preset.Spec)
	}
	// As combineBaseRefsConfig does: the presets first, the service's own spec last.
	merged, err := llmisvc.MergeSpecs(context.Background(), append(specs, service.Spec)...)
	fail(err)
	config := &v1alpha2.LLMInferenceServiceConfig{ObjectMeta: *service.ObjectMeta.DeepCopy(), Spec: merged}
	config, err = llmisvc.ReplaceVariables(service, config, &llmisvc.Config{EnableTLS: *tls})
	fail(err)
	out := result{Config: config, GroupSize: config.Spec.Parallelism.GetSize()}
	fail(json.NewEncoder(os.Stdout).Encode(out))
}

func read(path string, into any) {
	data, err := os.ReadFile(path)
	fail(err)
	fail(yaml.UnmarshalStrict(data, into))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmisvc-presets:", err)
		os.Exit(1)
	}
}
