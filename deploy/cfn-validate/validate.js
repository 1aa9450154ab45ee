#!/usr/bin/env node
// Checks a CloudFormation template against the AWS resource specification
// that @aws-cdk/aws-service-spec ships (the registry schemas of every
// resource type, as the CDK builds its L1 constructs from them):
//
//   - every resource Type exists;
//   - every property given is a property of its type, at every depth
//     (nested property types, lists and maps of them), and every required
//     property is present;
//   - a value has the shape its property wants (an object, a list, a map,
//     a scalar); intrinsic functions stand for any value, and both
//     branches of an Fn::If are checked;
//   - every Fn::GetAtt, and every ${Resource.Attribute} of an Fn::Sub,
//     names an attribute the resource type has; every Ref and ${Name}
//     names a parameter, a resource or a pseudo parameter;
//   - the template's sections, the resources' and the parameters' keys
//     are ones CloudFormation knows.
//
// Usage: node validate.js TEMPLATE.yaml...   (exit 1 on any problem)
// As a module: validate(text) returns the list of problems.
'use strict';

const fs = require('node:fs');
const YAML = require('yaml');
const { loadAwsServiceSpecSync } = require('@aws-cdk/aws-service-spec');

const SPEC_VERSION = require('@aws-cdk/aws-service-spec/package.json').version;

// ------------------------------------------------------------------ YAML

// CloudFormation's short-form tags, turned into their long form: !Ref X is
// {Ref: X}, !GetAtt A.B is {'Fn::GetAtt': [A, B]}, !Sub s is {'Fn::Sub': s}.
const FUNCTIONS = ['Base64', 'Cidr', 'FindInMap', 'GetAZs', 'ImportValue', 'Join', 'Select', 'Split', 'Sub',
  'Transform', 'If', 'Equals', 'Not', 'And', 'Or', 'ToJsonString', 'Length'];

function longForm(name, value) {
  if (name === 'Ref' || name === 'Condition') return { [name]: value };
  if (name === 'GetAtt') {
    if (typeof value === 'string') {
      const dot = value.indexOf('.');
      return { 'Fn::GetAtt': dot < 0 ? [value] : [value.slice(0, dot), value.slice(dot + 1)] };
    }
    return { 'Fn::GetAtt': value };
  }
  return { ['Fn::' + name]: value };
}

const customTags = [];
for (const name of ['Ref', 'Condition', 'GetAtt', ...FUNCTIONS]) {
  customTags.push({ tag: '!' + name, resolve: (v) => longForm(name, v) });
  customTags.push({ tag: '!' + name, collection: 'seq', resolve: (v) => longForm(name, v.toJSON()) });
  customTags.push({ tag: '!' + name, collection: 'map', resolve: (v) => longForm(name, v.toJSON()) });
}

function parse(text) {
  const doc = YAML.parseDocument(text, { customTags, uniqueKeys: true });
  if (doc.errors.length) throw new Error(doc.errors.map((e) => e.message).join('\n'));
  return doc.toJS({ maxAliasCount: -1 });
}

// ------------------------------------------------------------------ the specification

let db;
function spec() {
  if (!db) db = loadAwsServiceSpecSync();
  return db;
}

function resourceType(name) {
  const found = spec().lookup('resource', 'cloudFormationType', 'equals', name);
  return found.length === 1 ? found[0] : undefined;
}

function typeDefinition(ref) {
  return spec().get('typeDefinition', ref.$ref);
}

// ------------------------------------------------------------------ values

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// intrinsic returns the name of the intrinsic function v is, if it is one.
function intrinsic(v) {
  if (!isObject(v)) return undefined;
  const keys = Object.keys(v);
  if (keys.length !== 1) return undefined;
  const k = keys[0];
  return k === 'Ref' || k === 'Condition' || k.startsWith('Fn::') ? k : undefined;
}

const isNoValue = (v) => isObject(v) && v.Ref === 'AWS::NoValue';

const describe = (v) => (Array.isArray(v) ? 'a list' : isObject(v) ? 'an object' : v === null ? 'null' : `${typeof v} ${JSON.stringify(v)}`);

function typeName(t) {
  switch (t.type) {
    case 'ref': return typeDefinition(t.reference).name;
    case 'array': return `list of ${typeName(t.element)}`;
    case 'map': return `map of ${typeName(t.element)}`;
    case 'union': return t.types.map(typeName).join(' or ');
    default: return t.type;
  }
}

// checkValue appends to errs the problems of value v as type t at path.
function checkValue(v, t, path, errs) {
  if (isNoValue(v)) return;
  const fn = intrinsic(v);
  if (fn === 'Fn::If' && Array.isArray(v[fn]) && v[fn].length === 3) {
    checkValue(v[fn][1], t, `${path}(if true)`, errs);
    checkValue(v[fn][2], t, `${path}(if false)`, errs);
    return;
  }
  if (fn) return; // resolved at deploy time: any value
  switch (t.type) {
    case 'json':
      return;
    case 'union': {
      let best;
      for (const alt of t.types) {
        const e = [];
        checkValue(v, alt, path, e);
        if (e.length === 0) return;
        if (!best || e.length < best.length) best = e;
      }
      errs.push(...best);
      return;
    }
    case 'ref': {
      const def = typeDefinition(t.reference);
      if (!isObject(v)) {
        errs.push(`${path}: ${describe(v)}, want an object (${def.name})`);
        return;
      }
      checkProperties(v, def.properties, def.name, path, errs);
      return;
    }
    case 'tag':
      if (!isObject(v)) {
        errs.push(`${path}: ${describe(v)}, want a tag {Key, Value}`);
        return;
      }
      checkProperties(v, { Key: { required: true, type: { type: 'string' } }, Value: { required: true, type: { type: 'string' } } }, 'Tag', path, errs);
      return;
    case 'array':
      if (!Array.isArray(v)) {
        errs.push(`${path}: ${describe(v)}, want a list (${typeName(t)})`);
        return;
      }
      v.forEach((e, i) => checkValue(e, t.element, `${path}[${i}]`, errs));
      return;
    case 'map':
      if (!isObject(v)) {
        errs.push(`${path}: ${describe(v)}, want a map (${typeName(t)})`);
        return;
      }
      for (const [k, e] of Object.entries(v)) checkValue(e, t.element, `${path}.${k}`, errs);
      return;
    case 'string':
    case 'date-time':
      if (isObject(v) || Array.isArray(v) || v === null) errs.push(`${path}: ${describe(v)}, want a string`);
      return;
    case 'number':
    case 'integer':
      if (!(typeof v === 'number' || (typeof v === 'string' && v.trim() !== '' && !Number.isNaN(Number(v))))) {
        errs.push(`${path}: ${describe(v)}, want a number`);
      }
      return;
    case 'boolean':
      if (!(typeof v === 'boolean' || v === 'true' || v === 'false')) errs.push(`${path}: ${describe(v)}, want a boolean`);
      return;
    case 'null':
      return;
    default:
      errs.push(`${path}: the specification has a type ${t.type} this validator does not know`);
  }
}

// propertyType is a property's type, with the types it had before: the
// service still accepts those.
function propertyType(p) {
  const prev = p.previousTypes || [];
  return prev.length ? { type: 'union', types: [p.type, ...prev] } : p.type;
}

function checkProperties(obj, props, owner, path, errs) {
  for (const [k, v] of Object.entries(obj)) {
    const p = props[k];
    if (!p) {
      errs.push(`${path}.${k}: ${owner} has no property ${k} (it has ${Object.keys(props).sort().join(', ')})`);
      continue;
    }
    checkValue(v, propertyType(p), `${path}.${k}`, errs);
  }
  for (const [k, p] of Object.entries(props)) {
    if (p.required && (!(k in obj) || isNoValue(obj[k]))) errs.push(`${path}: ${owner} needs the property ${k}`);
  }
}

// ------------------------------------------------------------------ the template

const SECTIONS = new Set(['AWSTemplateFormatVersion', 'Description', 'Metadata', 'Parameters', 'Rules', 'Mappings',
  'Conditions', 'Transform', 'Resources', 'Outputs']);
const RESOURCE_KEYS = new Set(['Type', 'Properties', 'DependsOn', 'Condition', 'Metadata', 'DeletionPolicy',
  'UpdateReplacePolicy', 'CreationPolicy', 'UpdatePolicy']);
const PARAMETER_KEYS = new Set(['Type', 'Default', 'Description', 'AllowedValues', 'AllowedPattern', 'MinLength',
  'MaxLength', 'MinValue', 'MaxValue', 'NoEcho', 'ConstraintDescription']);
const PARAMETER_TYPE = /^(String|Number|List<Number>|CommaDelimitedList|AWS::[A-Za-z0-9:]+|List<AWS::[A-Za-z0-9:]+>|AWS::SSM::Parameter::(Name|Value<.+>))$/;
const POLICIES = new Set(['Delete', 'Retain', 'RetainExceptOnCreate', 'Snapshot']);
const PSEUDO = new Set(['AWS::AccountId', 'AWS::NotificationARNs', 'AWS::NoValue', 'AWS::Partition', 'AWS::Region',
  'AWS::StackId', 'AWS::StackName', 'AWS::URLSuffix']);

// walk calls fn(value, path) for every value under v.
function walk(v, path, fn) {
  fn(v, path);
  if (Array.isArray(v)) v.forEach((e, i) => walk(e, `${path}[${i}]`, fn));
  else if (isObject(v)) for (const [k, e] of Object.entries(v)) walk(e, `${path}.${k}`, fn);
}

function checkReferences(tpl, types, errs) {
  const params = tpl.Parameters || {};
  const resources = tpl.Resources || {};
  const known = (name) => name in params || name in resources || PSEUDO.has(name);
  const checkAtt = (res, att, path) => {
    if (!(res in resources)) {
      errs.push(`${path}: GetAtt of ${res}, which is not a resource`);
      return;
    }
    const rt = types[res];
    if (rt && !(att in rt.attributes)) {
      errs.push(`${path}: ${resources[res].Type} has no attribute ${att} (it has ${Object.keys(rt.attributes).sort().join(', ')})`);
    }
  };
  walk({ Resources: resources, Outputs: tpl.Outputs || {}, Conditions: tpl.Conditions || {} }, '', (v, path) => {
    const fn = intrinsic(v);
    if (fn === 'Ref') {
      if (typeof v.Ref !== 'string' || !known(v.Ref)) errs.push(`${path}: Ref ${JSON.stringify(v.Ref)}: no such parameter or resource`);
    } else if (fn === 'Fn::GetAtt') {
      const a = v[fn];
      if (!Array.isArray(a) || a.length !== 2 || typeof a[0] !== 'string') {
        errs.push(`${path}: Fn::GetAtt wants [Resource, Attribute], got ${JSON.stringify(a)}`);
      } else if (typeof a[1] === 'string') {
        checkAtt(a[0], a[1], path);
      }
    } else if (fn === 'Fn::Sub') {
      let s = v[fn];
      let locals = {};
      if (Array.isArray(s)) [s, locals = {}] = s;
      if (typeof s !== 'string') return;
      for (const m of s.matchAll(/\$\{([^}!][^}]*)\}/g)) {
        const ref = m[1].trim();
        if (ref in locals) continue;
        const dot = ref.indexOf('.');
        if (dot < 0 || ref.startsWith('AWS::')) {
          if (!known(ref)) errs.push(`${path}: Fn::Sub \${${ref}}: no such parameter or resource`);
        } else {
          checkAtt(ref.slice(0, dot), ref.slice(dot + 1), `${path} (\${${ref}})`);
        }
      }
    } else if (fn === 'Fn::If') {
      const c = Array.isArray(v[fn]) ? v[fn][0] : undefined;
      if (!(tpl.Conditions && c in tpl.Conditions)) errs.push(`${path}: Fn::If on ${JSON.stringify(c)}: no such condition`);
    }
  });
}

// validate returns the problems of the template text, one string each.
function validate(text) {
  const errs = [];
  let tpl;
  try {
    tpl = parse(text);
  } catch (e) {
    return [`the template is not valid YAML: ${e.message}`];
  }
  if (!isObject(tpl)) return ['the template is not a mapping'];
  for (const k of Object.keys(tpl)) if (!SECTIONS.has(k)) errs.push(`${k}: not a template section`);
  for (const [name, p] of Object.entries(tpl.Parameters || {})) {
    for (const k of Object.keys(p)) if (!PARAMETER_KEYS.has(k)) errs.push(`Parameters.${name}.${k}: not a parameter property`);
    if (!PARAMETER_TYPE.test(String(p.Type))) errs.push(`Parameters.${name}.Type: ${JSON.stringify(p.Type)} is not a parameter type`);
  }
  const resources = tpl.Resources;
  if (!isObject(resources) || Object.keys(resources).length === 0) errs.push('Resources: the template has none');
  const types = {};
  for (const [name, r] of Object.entries(resources || {})) {
    const path = `Resources.${name}`;
    if (!isObject(r)) {
      errs.push(`${path}: not a mapping`);
      continue;
    }
    for (const k of Object.keys(r)) if (!RESOURCE_KEYS.has(k)) errs.push(`${path}.${k}: not a resource attribute`);
    for (const k of ['DeletionPolicy', 'UpdateReplacePolicy']) {
      if (k in r && !POLICIES.has(r[k])) errs.push(`${path}.${k}: ${JSON.stringify(r[k])} is not a policy`);
    }
    if (r.Condition !== undefined && !(tpl.Conditions && r.Condition in tpl.Conditions)) {
      errs.push(`${path}.Condition: no such condition ${JSON.stringify(r.Condition)}`);
    }
    const rt = typeof r.Type === 'string' ? resourceType(r.Type) : undefined;
    if (!rt) {
      if (typeof r.Type === 'string' && r.Type.startsWith('Custom::')) continue;
      errs.push(`${path}.Type: ${JSON.stringify(r.Type)} is not a resource type of the specification`);
      continue;
    }
    types[name] = rt;
    const props = r.Properties === undefined ? {} : r.Properties;
    if (!isObject(props)) {
      errs.push(`${path}.Properties: ${describe(props)}, want an object`);
      continue;
    }
    checkProperties(props, rt.properties, r.Type, `${path}.Properties`, errs);
  }
  for (const [name, o] of Object.entries(tpl.Outputs || {})) {
    if (!isObject(o) || !('Value' in o)) errs.push(`Outputs.${name}: no Value`);
  }
  checkReferences(tpl, types, errs);
  return errs;
}

module.exports = { validate, SPEC_VERSION };

if (require.main === module) {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error('usage: node validate.js TEMPLATE.yaml...');
    process.exit(2);
  }
  let bad = 0;
  for (const f of files) {
    const text = fs.readFileSync(f, 'utf8');
    const errs = validate(text);
    if (errs.length) {
      bad++;
      console.error(`${f}: ${errs.length} problem(s) against the AWS resource specification (@aws-cdk/aws-service-spec ${SPEC_VERSION}):`);
      for (const e of errs) console.error('  ' + e);
    } else {
      const n = Object.keys(parse(text).Resources).length;
      console.log(`${f}: ${n} resources valid against the AWS resource specification (@aws-cdk/aws-service-spec ${SPEC_VERSION})`);
    }
  }
  process.exit(bad ? 1 : 0);
}
