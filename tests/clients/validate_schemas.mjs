// validate_schemas.mjs: an independent check of structured output. Reads a JSON file (argv[2])
// {"cases": [{"name", "schema", "outputs": [text, ...]}]}, compiles each schema with ajv (JSON
// Schema 2020-12, ajv-formats for "format") and validates every output text after JSON.parse.
// Prints one JSON line {"name": {"validated": n, "failures": [{"output", "errors"}]}} and exits
// 1 when any output does not parse or validate, 2 when a schema does not compile.
// Driven by tests/integration/test_structured_output.py (packages pinned in package.json).
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const { cases } = JSON.parse(readFileSync(process.argv[2], "utf8"));
// strict: false lets annotations ajv does not know (pydantic's "discriminator") pass as such
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const report = {};
let failed = false;
for (const c of cases) {
  let validate;
  try {
    validate = ajv.compile(c.schema);
  } catch (e) {
    console.log(JSON.stringify({ [c.name]: { compile_error: String(e) } }));
    process.exit(2);
  }
  const r = { validated: 0, failures: [] };
  for (const text of c.outputs) {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      r.failures.push({ output: text, errors: "does not parse: " + e.message });
      continue;
    }
    if (validate(value)) r.validated++;
    else r.failures.push({ output: text, errors: validate.errors });
  }
  if (r.failures.length) failed = true;
  report[c.name] = r;
}
console.log(JSON.stringify(report));
process.exit(failed ? 1 : 0);
