#!/usr/bin/env node
// Enforces the package dependency rules (CONTRIBUTING.md) on package.json files and on the import
// statements in packages/*/src. Usage: node scripts/check-deps.mjs [--root DIR]
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const SCOPE = "@stormlog/";

/** Which of our packages each package may depend on (short names, without the scope). */
export const RULES = {
  core: [],
  phases: ["core"],
  sink: ["core"],
  tracker: ["core", "phases", "sink"],
  analysis: ["core", "phases", "sink"],
  parquet: ["core", "phases", "sink", "analysis"],
  report: ["core", "phases", "sink", "analysis"],
  "adapter-tfjs": ["core"],
  "adapter-cuda": ["core"],
  "adapter-onnxruntime": ["core"],
  wandb: ["core", "sink"],
  cli: "*",
};

const DEP_FIELDS = ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"];
const SOURCE_EXT = /\.(?:[cm]?ts|tsx|[cm]?js|jsx)$/;
// Module specifiers in static imports/exports, side-effect imports, dynamic import() and require().
const SPECIFIER_PATTERNS = [
  /\b(?:import|export)\s[^"'`;]*?\bfrom\s*["']([^"']+)["']/g,
  /\bimport\s*["']([^"']+)["']/g,
  /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  /\brequire\s*\(\s*["']([^"']+)["']\s*\)/g,
];

function allowedFor(short) {
  return Object.hasOwn(RULES, short) ? RULES[short] : undefined;
}

function isAllowed(from, to) {
  if (from === to) return true;
  const allowed = allowedFor(from);
  return allowed === "*" ? Object.hasOwn(RULES, to) : (allowed?.includes(to) ?? false);
}

function describeAllowed(from) {
  const allowed = allowedFor(from);
  if (allowed === "*") return "any @stormlog package";
  return allowed.length === 0 ? "no other @stormlog package" : allowed.map((s) => SCOPE + s).join(", ");
}

function* walk(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === "node_modules" || entry.name === "dist") continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else if (entry.isFile() && SOURCE_EXT.test(entry.name)) yield path;
  }
}

/** Strips comments while keeping line numbers, so commented-out imports do not count. */
function stripComments(text) {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (m) => m.replace(/[^\n]/g, " "))
    .replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

function lineOf(text, index) {
  let line = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** Returns the list of violations (strings) for the repository at `root`. */
export function checkDependencies(root) {
  const violations = [];
  const packagesDir = join(root, "packages");
  if (!existsSync(packagesDir)) return [`no packages/ directory under ${root}`];

  for (const dir of readdirSync(packagesDir).sort()) {
    const pkgDir = join(packagesDir, dir);
    const manifestPath = join(pkgDir, "package.json");
    if (!statSync(pkgDir).isDirectory() || !existsSync(manifestPath)) continue;
    const manifest = JSON.parse(readFileSync(manifestPath, "utf8"));
    const name = String(manifest.name ?? "");
    const where = relative(root, manifestPath);
    if (!name.startsWith(SCOPE)) {
      violations.push(`${where}: package name "${name}" is not in the ${SCOPE} scope`);
      continue;
    }
    const short = name.slice(SCOPE.length);
    if (allowedFor(short) === undefined) {
      violations.push(`${where}: ${name} has no dependency rule; add it to RULES in scripts/check-deps.mjs`);
      continue;
    }

    const declared = new Set();
    for (const field of DEP_FIELDS) {
      for (const dep of Object.keys(manifest[field] ?? {})) {
        if (!dep.startsWith(SCOPE)) continue;
        const target = dep.slice(SCOPE.length);
        declared.add(target);
        if (!isAllowed(short, target)) {
          violations.push(
            `${where}: ${name} lists ${dep} in ${field}, but may depend only on ${describeAllowed(short)}`,
          );
        }
      }
    }

    const srcDir = join(pkgDir, "src");
    if (!existsSync(srcDir)) continue;
    for (const file of walk(srcDir)) {
      const text = stripComments(readFileSync(file, "utf8"));
      const rel = relative(root, file);
      for (const pattern of SPECIFIER_PATTERNS) {
        for (const match of text.matchAll(pattern)) {
          const spec = match[1];
          const at = `${rel}:${lineOf(text, match.index)}`;
          if (spec.startsWith(SCOPE)) {
            const target = spec.slice(SCOPE.length).split("/")[0];
            if (!isAllowed(short, target)) {
              violations.push(
                `${at}: ${name} imports ${spec}, but may import only ${describeAllowed(short)}`,
              );
            } else if (target !== short && !declared.has(target)) {
              violations.push(`${at}: ${name} imports ${spec}; add "${SCOPE}${target}" to its package.json`);
            }
          } else if (spec.startsWith(".")) {
            const resolved = resolve(dirname(file), spec);
            if (resolved !== pkgDir && !resolved.startsWith(pkgDir + sep)) {
              violations.push(
                `${at}: ${name} imports ${spec}, outside its package; import the package by name`,
              );
            }
          }
        }
      }
    }
  }
  return violations;
}

function main(argv) {
  let root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--root" && argv[i + 1]) root = resolve(argv[++i]);
    else if (argv[i] === "--help" || argv[i] === "-h") {
      console.log("usage: node scripts/check-deps.mjs [--root DIR]");
      return 0;
    } else {
      console.error(`check-deps: unknown argument ${argv[i]}`);
      return 2;
    }
  }
  const violations = checkDependencies(root);
  if (violations.length > 0) {
    console.error(`check-deps: ${violations.length} dependency rule violation(s):`);
    for (const v of violations) console.error(`  ${v}`);
    console.error('The rules are in CONTRIBUTING.md ("Dependency rules").');
    return 1;
  }
  console.log("check-deps: all packages follow the dependency rules.");
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
