// Package deploy holds how adclick runs for real, as files rather than Go
// code: the container image (Dockerfile), the AWS CloudFormation template
// (cloudformation/), the systemd unit (systemd/), the image's health probe
// (healthcheck/, a command), the template's check against the AWS resource
// specification (cfn-validate/, Node.js, run by scripts/test.sh) and, from
// the operator surface, the Prometheus alert rules (prometheus/) and the
// Grafana dashboard (grafana/). README.md explains them and the sizing.
//
// Its tests keep those files true to the code: the Dockerfile's build
// command is run and must give the same binary as go build; the template
// must declare everything the service needs, its table must match
// sink/dynamo's CreateTable, and its IAM policies must name exactly the
// Kinesis, DynamoDB and S3 API actions the Go source calls; every flag and
// ADCLICK_ variable the template, the image and the systemd unit pass must
// exist in `adclick run --help`; the health checks must run the image's
// probe on the route the API serves; the fleet (FleetWorkers above 0) must
// exist only under its condition, run what `run --fleet` accepts, deploy
// one extra task at a time, and be allowed the lease-table and stream calls
// of lease/ and ingest/kinesis/. The package has no Go API.
package deploy
