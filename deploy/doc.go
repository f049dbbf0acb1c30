// Package deploy holds aguard's deployment files: the container image
// (Dockerfile), a Docker Compose setup with two replicas, Redis and a demo
// agent (compose.yaml), Kubernetes manifests (k8s/) and a Helm chart
// (helm/aguard, with example values in helm/examples). See README.md.
//
// It has no Go API. Its test reads those files and checks them against the
// code they configure: every flag and AGUARD_* variable must be a setting of
// package config, probes must hit paths the admin handler serves on the port
// the configuration listens on, and the shipped policy copy must match
// policies/aguard/default.rego. The chart is linted and rendered with Helm's
// Go SDK, which only the tests import, and what it renders is checked the
// same way.
package deploy
