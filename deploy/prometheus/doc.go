// Package prometheus holds no code: this folder keeps adclick's Prometheus
// alert rules (alerts.yml), checked by `promtool check rules` in the test
// command. Its test checks that every metric the rules and the Grafana
// dashboard (../grafana/adclick.json) use is defined in the code, so a
// renamed metric fails the build instead of silencing an alert.
package prometheus
