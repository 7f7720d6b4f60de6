/**
 * The key paths a JSON Schema, a real report and a TypeScript type name, in one notation so that they
 * can be compared: `$.summary.peaks.device_used_bytes`, `[]` for array items, `*` for the entries of
 * a map (`additionalProperties` in the schema, a string index signature in the type).
 */
import { dirname } from "node:path";
import ts from "typescript";

export type SchemaNode = { readonly [key: string]: unknown };

/** Whether a key must be present, and whether it may be null. */
export interface KeyInfo {
  required: boolean;
  nullable: boolean;
}

const DEFS = "#/$defs/";

function deref(schema: SchemaNode, node: SchemaNode): { node: SchemaNode; def: string | null } {
  const ref = node.$ref;
  if (typeof ref !== "string") return { node, def: null };
  if (!ref.startsWith(DEFS)) throw new Error(`unsupported $ref ${ref}`);
  const name = ref.slice(DEFS.length);
  const def = (schema.$defs as Record<string, SchemaNode>)[name];
  if (def === undefined) throw new Error(`no $defs entry ${name}`);
  return { node: def, def: name };
}

function isNullable(schema: SchemaNode, raw: SchemaNode): boolean {
  const { node } = deref(schema, raw);
  const type = node.type;
  return (
    type === "null" ||
    (Array.isArray(type) && type.includes("null")) ||
    (Array.isArray(node.enum) && node.enum.includes(null)) ||
    ((node.anyOf as SchemaNode[] | undefined) ?? []).some((branch) => isNullable(schema, branch))
  );
}

const propertiesOf = (node: SchemaNode) => (node.properties ?? {}) as Record<string, SchemaNode>;
const mapValues = (node: SchemaNode) =>
  typeof node.additionalProperties === "object" ? (node.additionalProperties as SchemaNode) : null;

/**
 * The keys the schema names. `expand`: every place a `$defs` entry is used gets its own paths (as
 * in the type); otherwise a `$defs` entry's keys are named once, under `#name`. `allOf`/`if`
 * only narrow what `properties` and `anyOf` already name, so they are not read.
 */
export function schemaKeyPaths(schema: SchemaNode, options: { expand: boolean }): Map<string, KeyInfo> {
  const out = new Map<string, KeyInfo>();
  const visited = new Set<string>();
  const walk = (raw: SchemaNode, at: string): void => {
    const { node, def } = deref(schema, raw);
    let path = at;
    if (def !== null && !options.expand) {
      if (visited.has(def)) return;
      visited.add(def);
      path = `#${def}`;
    }
    for (const branch of (node.anyOf as SchemaNode[] | undefined) ?? []) walk(branch, path);
    const required = new Set((node.required as string[] | undefined) ?? []);
    for (const [key, child] of Object.entries(propertiesOf(node))) {
      out.set(`${path}.${key}`, { required: required.has(key), nullable: isNullable(schema, child) });
      walk(child, `${path}.${key}`);
    }
    if (node.items !== undefined) walk(node.items as SchemaNode, `${path}[]`);
    const values = mapValues(node);
    if (values !== null) {
      out.set(`${path}.*`, { required: false, nullable: isNullable(schema, values) });
      walk(values, `${path}.*`);
    }
  };
  walk(schema, "$");
  return out;
}

/**
 * The keys `value` has, in `schemaKeyPaths(schema, { expand: false })`'s notation. A key the schema
 * does not name is listed under its own name, so that it shows up as a difference.
 */
export function reportKeyPaths(schema: SchemaNode, value: unknown): Set<string> {
  const out = new Set<string>();
  const walk = (raw: SchemaNode | undefined, item: unknown, at: string): void => {
    if (raw === undefined || item === null || typeof item !== "object") return;
    const { node, def } = deref(schema, raw);
    const path = def === null ? at : `#${def}`;
    if (Array.isArray(item)) {
      for (const element of item) walk(node.items as SchemaNode | undefined, element, `${path}[]`);
      return;
    }
    const keys = Object.keys(item);
    const branches = node.anyOf as SchemaNode[] | undefined;
    if (branches !== undefined) {
      // The branch that names every key (the gap evidence of one classification).
      const branch = branches.find((b) => keys.every((key) => key in propertiesOf(deref(schema, b).node)));
      if (branch === undefined) throw new Error(`no branch of ${path} names ${keys.join(", ")}`);
      walk(branch, item, path);
      return;
    }
    const values = mapValues(node);
    for (const [key, child] of Object.entries(item)) {
      const named = propertiesOf(node)[key];
      if (named !== undefined) {
        out.add(`${path}.${key}`);
        walk(named, child, `${path}.${key}`);
      } else if (values !== null) {
        out.add(`${path}.*`);
        walk(values, child, `${path}.*`);
      } else out.add(`${path}.${key}`);
    }
  };
  walk(schema, value, "$");
  return out;
}

/** How the JSON form differs from the type at the top level. */
export interface JsonForm {
  /** Keys the JSON leaves out. */
  omit: readonly string[];
  /** Nullable keys that the JSON leaves out when null instead. */
  optionalInsteadOfNull: readonly string[];
}

/**
 * The keys an exported interface names, through every property type (arrays, unions, intersections,
 * `extends`, `Omit`, string index signatures), as the TypeScript compiler resolves them with the
 * package's tsconfig.
 */
export function typeKeyPaths(
  options: { tsconfig: string; file: string; typeName: string } & JsonForm,
): Map<string, KeyInfo> {
  const { config } = ts.readConfigFile(options.tsconfig, ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(config, ts.sys, dirname(options.tsconfig));
  const program = ts.createProgram([options.file], { ...parsed.options, noEmit: true });
  const checker = program.getTypeChecker();
  const declaration = program
    .getSourceFile(options.file)
    ?.statements.find(
      (statement): statement is ts.InterfaceDeclaration =>
        ts.isInterfaceDeclaration(statement) && statement.name.text === options.typeName,
    );
  if (declaration === undefined) throw new Error(`no interface ${options.typeName} in ${options.file}`);
  const out = new Map<string, KeyInfo>();
  const parts = (type: ts.Type): readonly ts.Type[] => (type.isUnion() ? type.types : [type]);
  const isNull = (type: ts.Type) => (type.flags & ts.TypeFlags.Null) !== 0;
  const properties = (type: ts.Type, path: string, top: boolean): void => {
    for (const symbol of checker.getPropertiesOfType(type)) {
      const key = symbol.getName();
      if (top && options.omit.includes(key)) continue;
      const propertyType = checker.getTypeOfSymbol(symbol);
      const leftOut = top && options.optionalInsteadOfNull.includes(key);
      out.set(`${path}.${key}`, {
        required: !leftOut && (symbol.flags & ts.SymbolFlags.Optional) === 0,
        nullable: !leftOut && parts(propertyType).some(isNull),
      });
      for (const part of parts(propertyType)) descend(part, `${path}.${key}`);
    }
  };
  const descend = (type: ts.Type, path: string): void => {
    if (checker.isArrayType(type)) {
      const [element] = checker.getTypeArguments(type as ts.TypeReference);
      if (element !== undefined) for (const part of parts(element)) descend(part, `${path}[]`);
      return;
    }
    if ((type.flags & (ts.TypeFlags.Object | ts.TypeFlags.Intersection)) === 0) return;
    const index = checker.getIndexInfoOfType(type, ts.IndexKind.String);
    if (index !== undefined && checker.getPropertiesOfType(type).length === 0) {
      out.set(`${path}.*`, { required: false, nullable: parts(index.type).some(isNull) });
      for (const part of parts(index.type)) descend(part, `${path}.*`);
      return;
    }
    properties(type, path, false);
  };
  properties(checker.getTypeAtLocation(declaration.name), "$", true);
  return out;
}
