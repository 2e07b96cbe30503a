// Package deploy holds the Kubernetes manifests for pilot and the injection
// webhook (*.yaml here); its test decodes them strictly with k8s.io/api's types
// and checks them against the names the code uses. Manifests embeds them for
// tools that print or apply them.
package deploy

import "embed"

// Manifests are the *.yaml files of this directory.
//
//go:embed *.yaml
var Manifests embed.FS
