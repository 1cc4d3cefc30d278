#!/usr/bin/env node
// Validates every schemas/<name>.schema.json with ajv (draft 2020-12 or 07,
// chosen from the schema's $schema): each schemas/examples/<name>/valid/*.json
// must validate and each schemas/examples/<name>/invalid/*.json must fail.
// Exits non-zero on any mismatch, on a schema without examples, and when
// tests/js/node_modules is missing (run `npm install` in tests/js).
'use strict';
const fs = require('fs');
const path = require('path');

const here = __dirname;
const root = path.resolve(here, '..', '..');
const schemasDir = path.join(root, 'schemas');

function requireModule(name) {
  try {
    return require(path.join(here, 'node_modules', name));
  } catch (e) {
    console.error(`validate_schemas: cannot load '${name}' from ${path.join(here, 'node_modules')}: ` +
                  `run 'npm install' in tests/js (${e.message.split('\n')[0]})`);
    process.exit(1);
  }
}

const Ajv2020 = requireModule('ajv/dist/2020').default;
const Ajv07 = requireModule('ajv').default;
const addFormats = requireModule('ajv-formats').default || requireModule('ajv-formats');

function makeAjv(schema) {
  const is2020 = String(schema.$schema || '').includes('2020-12');
  const ajv = is2020 ? new Ajv2020({allErrors: true, strict: false}) : new Ajv07({allErrors: true, strict: false});
  addFormats(ajv);
  return ajv;
}

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function listJson(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort().map((f) => path.join(dir, f));
}

let failures = 0;
let checked = 0;
const schemaFiles = fs.readdirSync(schemasDir).filter((f) => f.endsWith('.schema.json')).sort();
if (schemaFiles.length === 0) {
  console.error('validate_schemas: no schemas/*.schema.json found');
  process.exit(1);
}
for (const file of schemaFiles) {
  const name = file.replace(/\.schema\.json$/, '');
  let schema;
  let validate;
  try {
    schema = readJson(path.join(schemasDir, file));
    validate = makeAjv(schema).compile(schema);
  } catch (e) {
    console.error(`FAIL ${file}: the schema does not compile: ${e.message}`);
    failures++;
    continue;
  }
  const valid = listJson(path.join(schemasDir, 'examples', name, 'valid'));
  const invalid = listJson(path.join(schemasDir, 'examples', name, 'invalid'));
  if (valid.length === 0) {
    console.error(`FAIL ${file}: no examples in schemas/examples/${name}/valid/`);
    failures++;
  }
  for (const ex of valid) {
    checked++;
    const rel = path.relative(root, ex);
    let doc;
    try { doc = readJson(ex); } catch (e) { console.error(`FAIL ${rel}: not JSON: ${e.message}`); failures++; continue; }
    if (!validate(doc)) {
      console.error(`FAIL ${rel}: expected valid, got ${JSON.stringify(validate.errors.slice(0, 3))}`);
      failures++;
    } else {
      console.log(`ok   ${rel} (valid)`);
    }
  }
  for (const ex of invalid) {
    checked++;
    const rel = path.relative(root, ex);
    let doc;
    try { doc = readJson(ex); } catch (e) { console.log(`ok   ${rel} (not even JSON)`); continue; }
    if (validate(doc)) {
      console.error(`FAIL ${rel}: expected the schema to reject it, but it validates`);
      failures++;
    } else {
      const first = validate.errors[0];
      console.log(`ok   ${rel} (rejected: ${first.instancePath || '/'} ${first.message})`);
    }
  }
}
console.log(`${schemaFiles.length} schemas, ${checked} examples, ${failures} failures`);
process.exit(failures ? 1 : 0);
