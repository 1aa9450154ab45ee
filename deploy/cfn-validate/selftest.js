#!/usr/bin/env node
// Checks that validate.js finds what it must: every problem planted in
// testdata/bad.yaml, each in its place, and nothing in its Good resource.
// scripts/test.sh runs it before validating the real template, so that a
// validator that finds nothing cannot pass for a valid template.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { validate } = require('./validate');

// Each expected problem: a fragment of the message, in order of the file.
const want = [
  'Bogus: not a template section',
  'Parameters.Size.Type: "Integr" is not a parameter type',
  'Resources.UnknownType.Type: "AWS::DynamoDB::Tabel" is not a resource type',
  'Resources.UnknownProperty.Properties.BucketNme: AWS::S3::Bucket has no property BucketNme',
  'Resources.MissingRequired.Properties: AWS::DynamoDB::Table needs the property KeySchema',
  'Resources.NestedUnknown.Properties.TimeToLiveSpecification.Attribute: TimeToLiveSpecification has no property Attribute',
  'Resources.NestedMissing.Properties.DeploymentConfiguration.DeploymentCircuitBreaker: DeploymentCircuitBreaker needs the property Rollback',
  'Resources.WrongShape.Properties.ContainerDefinitions: an object, want a list',
  'Resources.WrongShape.Properties.Cpu: a list, want a string',
  'Resources.WrongShape.Properties.RuntimePlatform: string "x86", want an object (RuntimePlatform)',
  'Resources.BadIfBranch.Properties.VersioningConfiguration(if false).Statuz: VersioningConfiguration has no property Statuz',
  'Resources.BadIfBranch.Properties.VersioningConfiguration(if false): VersioningConfiguration needs the property Status',
  'Resources.BadRef.Propertiez: not a resource attribute',
  'Resources.BadRef.DeletionPolicy: "Keep" is not a policy',
  'Resources.BadRef.Condition: no such condition "Maybe"',
  'Resources.BadContainer.Properties.ContainerDefinitions[0].HealthCheck.Intervall: HealthCheck has no property Intervall',
  'Outputs.NoValue: no Value',
  '.Resources.BadAttribute.Properties.DisplayName: AWS::S3::Bucket has no attribute Arnn',
  '.Resources.BadSub.Properties.DisplayName: Fn::Sub ${Nope}: no such parameter or resource',
  '.Resources.BadSub.Properties.DisplayName (${UnknownProperty.DomainNam}): AWS::S3::Bucket has no attribute DomainNam',
  '.Resources.BadRef.Properties.TopicName: Ref "Missing": no such parameter or resource',
];

const got = validate(fs.readFileSync(path.join(__dirname, 'testdata', 'bad.yaml'), 'utf8'));
let failed = 0;
for (const w of want) {
  if (!got.some((g) => g.includes(w))) {
    console.error(`selftest: missed: ${w}`);
    failed++;
  }
}
for (const g of got) {
  if (!want.some((w) => g.includes(w))) {
    console.error(`selftest: unexpected: ${g}`);
    failed++;
  }
  if (g.includes('.Good')) {
    console.error(`selftest: the Good resource is valid, got: ${g}`);
    failed++;
  }
}
if (failed) {
  console.error(`selftest: ${failed} difference(s); all problems found:\n  ${got.join('\n  ')}`);
  process.exit(1);
}
console.log(`selftest: the validator finds all ${want.length} planted problems and nothing else`);
