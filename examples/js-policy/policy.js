// An example toolward policy component in JavaScript (world `policy-component` of
// `toolward:policy@0.1.0`), making the same decisions as `examples/custom-policy` (Rust) and
// passing the same `cases.json` with the same `settings.json`:
//
// - a `local-change` or `destructive` call whose path argument leaves the configured
//   `write_root`, after lexical normalisation, is denied (`checkPath`);
// - a `remote-change` call whose URL argument names a host off the configured allowlist is
//   held for approval; a URL it cannot read unambiguously is denied (`urlHost`);
// - everything else is decided by the default decision table, from the `rules` object of the
//   settings (`Rules`, a port of the decision half of the `toolward-policy-table` crate).
//
// The checks only ever tighten the table: the answer is the stricter of the check's and the
// table's (deny over hold over allow).
//
// Built with `jco componentize ... --disable all` (see `package.json`): every WASI feature
// of the JavaScript runtime is left out, so the component imports nothing but toolward's
// `types`, like a Rust guest. `configure` runs once; the host snapshots the configured
// instance, so `SETTINGS` is already parsed in every decision's fresh instance.
//
// The WIT → JavaScript mapping (jco): records are objects with camelCase fields
// (`call.timeMs`, `call.argumentsSha256`), enums are their WIT strings (`"read-only"`), a
// `decision` is `{ tag: "allow" }`, `{ tag: "deny", val: reason }` or
// `{ tag: "hold", val: reason }`, and `configure` refuses its settings by throwing the
// message.

/** The settings for `decide`, set by `configure`. */
let SETTINGS = null;

const EFFECTS = ["read-only", "local-change", "remote-change", "destructive"];
const VERDICTS = ["allow", "deny", "hold"];
/** The built-in table, by effect: read-only allow, local-change hold, remote-change hold, destructive deny. */
const DEFAULT_TABLE = { "read-only": "allow", "local-change": "hold", "remote-change": "hold", destructive: "deny" };
/** The keys of a `limits` object: [key, counted, per]. */
const LIMIT_KEYS = [
  ["forwarded_per_minute", "forwarded", "minute"],
  ["forwarded_per_hour", "forwarded", "hour"],
  ["held_per_minute", "held", "minute"],
  ["held_per_hour", "held", "hour"],
];
const SETTINGS_KEYS = ["$schema", "rules", "write_root", "path_arguments", "allowed_hosts", "url_arguments"];
const TOOL_KEYS = ["effect", "deny", "fix", "description", "allow_hint_mismatch", "decision", "limits"];
const U64_MAX = 18446744073709551615n;

// ---------------------------------------------------------------------------------------
// Rules: the rules file and its decision table (docs/rules.schema.json), decisions only.
// Classification stays with toolward's built-in component: this world exports `policy`.

/** A fault in the settings, at a dotted path. */
class Fault extends Error {
  constructor(path, message) {
    super(`${path === "" ? "(root)" : path}: ${message}`);
  }
}

const join = (path, key) => (path === "" ? key : `${path}.${key}`);
/** Rust's `{:?}` of a string, as the Rust component's messages quote names. */
const quoted = (text) => JSON.stringify(text);

function typeName(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  switch (typeof value) {
    case "boolean":
      return "a boolean";
    case "number":
      return "a number";
    case "string":
      return "a string";
    default:
      return "an object";
  }
}

function object(value, path) {
  if (typeName(value) !== "an object") {
    throw new Fault(path, `expected an object, found ${typeName(value)}`);
  }
  return value;
}

/** Keys starting with `_` are comments (`toolward init` writes hints there). */
function onlyKeys(map, path, allowed) {
  const key = Object.keys(map).find((k) => !k.startsWith("_") && !allowed.includes(k));
  if (key !== undefined) {
    throw new Fault(join(path, key), `unknown key (expected one of ${allowed.join(", ")})`);
  }
}

function verdictOf(value, path) {
  if (typeof value !== "string") {
    throw new Fault(path, `expected "allow", "deny" or "hold", found ${typeName(value)}`);
  }
  if (!VERDICTS.includes(value)) {
    throw new Fault(path, `unknown decision ${quoted(value)} (expected allow, deny or hold)`);
  }
  return value;
}

function table(value, path) {
  const out = {};
  for (const [key, verdict] of Object.entries(object(value, path))) {
    const here = join(path, key);
    if (!EFFECTS.includes(key)) throw new Fault(here, `unknown effect ${quoted(key)}`);
    out[key] = verdictOf(verdict, here);
  }
  return out;
}

function limitsOf(value, path) {
  const map = object(value, path);
  onlyKeys(
    map,
    path,
    LIMIT_KEYS.map(([key]) => key),
  );
  const limits = [];
  for (const [key, counted, per] of LIMIT_KEYS) {
    if (!(key in map)) continue;
    const max = map[key];
    if (!Number.isSafeInteger(max) || max < 0) {
      const found = typeof max === "number" ? String(max) : typeName(max);
      throw new Fault(join(path, key), `expected a non-negative integer (a count of calls), found ${found}`);
    }
    limits.push({ counted, per, max: BigInt(max) });
  }
  return limits;
}

function toolRule(value, path) {
  const map = object(value, path);
  onlyKeys(map, path, TOOL_KEYS);
  const effectPath = join(path, "effect");
  if (!("effect" in map)) throw new Fault(effectPath, "missing (every classified tool needs an effect)");
  if (typeof map.effect !== "string") {
    throw new Fault(effectPath, `expected a string, found ${typeName(map.effect)}`);
  }
  if (!EFFECTS.includes(map.effect)) throw new Fault(effectPath, `unknown effect ${quoted(map.effect)}`);
  const deny = [];
  if ("deny" in map) {
    const here = join(path, "deny");
    if (!Array.isArray(map.deny)) {
      throw new Fault(here, `expected an array of names, found ${typeName(map.deny)}`);
    }
    map.deny.forEach((item, i) => {
      if (typeof item !== "string") throw new Fault(`${here}[${i}]`, `expected a name, found ${typeName(item)}`);
      if (deny.includes(item)) throw new Fault(`${here}[${i}]`, `${quoted(item)} is named twice`);
      deny.push(item);
    });
  }
  if ("fix" in map) {
    const here = join(path, "fix");
    for (const name of Object.keys(object(map.fix, here))) {
      if (deny.includes(name)) throw new Fault(join(here, name), `${quoted(name)} is both denied and fixed`);
    }
  }
  if ("description" in map && typeof map.description !== "string") {
    throw new Fault(join(path, "description"), `expected a string, found ${typeName(map.description)}`);
  }
  if ("allow_hint_mismatch" in map && typeof map.allow_hint_mismatch !== "boolean") {
    throw new Fault(join(path, "allow_hint_mismatch"), `expected a boolean, found ${typeName(map.allow_hint_mismatch)}`);
  }
  return {
    decision: "decision" in map ? verdictOf(map.decision, join(path, "decision")) : undefined,
    limits: "limits" in map ? limitsOf(map.limits, join(path, "limits")) : [],
  };
}

/** Whether `value` is `{"effect": "unclassified"}` (with `_` comments only): no rule. */
function isUnclassified(value, path) {
  const map = object(value, path);
  if (map.effect !== "unclassified") return false;
  try {
    onlyKeys(map, path, ["effect"]);
  } catch (fault) {
    throw new Error(`${fault.message} (an unclassified tool takes only \`effect\` and \`_\` comments)`);
  }
  return true;
}

/** A parsed rules object: `{ decisions, servers: Map(name → { decisions, limits, tools: Map }) }`. */
function parseRules(root) {
  const map = object(root, "");
  onlyKeys(map, "", ["$schema", "decisions", "servers"]);
  const servers = new Map();
  for (const [server, rules] of Object.entries("servers" in map ? object(map.servers, "servers") : {})) {
    const path = join("servers", server);
    const serverMap = object(rules, path);
    onlyKeys(serverMap, path, ["tools", "decisions", "limits"]);
    const tools = new Map();
    const toolsPath = join(path, "tools");
    for (const [tool, rule] of Object.entries("tools" in serverMap ? object(serverMap.tools, toolsPath) : {})) {
      const here = join(toolsPath, tool);
      if (!isUnclassified(rule, here)) tools.set(tool, toolRule(rule, here));
    }
    servers.set(server, {
      tools,
      decisions: "decisions" in serverMap ? table(serverMap.decisions, join(path, "decisions")) : {},
      limits: "limits" in serverMap ? limitsOf(serverMap.limits, join(path, "limits")) : [],
    });
  }
  return { servers, decisions: "decisions" in map ? table(map.decisions, "decisions") : {} };
}

/** The verdict for a call and where it came from (for the reason). */
function verdict(rules, server, tool, effect) {
  const serverRules = rules.servers.get(server);
  const toolDecision = serverRules?.tools.get(tool)?.decision;
  if (toolDecision !== undefined) return [toolDecision, `the rule for tool \`${tool}\` of server \`${server}\``];
  const serverDecision = serverRules?.decisions[effect];
  if (serverDecision !== undefined) return [serverDecision, `the decision table of server \`${server}\``];
  if (rules.decisions[effect] !== undefined) return [rules.decisions[effect], "the rules file's decision table"];
  return [DEFAULT_TABLE[effect], "the default decision table"];
}

/** A count as a fact's JSON text spells it: a non-negative integer, no sign, no leading zero, fits u64. */
function parseCount(text) {
  if (!/^(0|[1-9][0-9]*)$/.test(text)) return null;
  const count = BigInt(text);
  return count <= U64_MAX ? count : null;
}

function limitText({ counted, per, max }) {
  return `${max} ${counted} ${max === 1n ? "call" : "calls"} per ${per}`;
}

/** The table's decision with the tool's and then the server's limits checked against the call's facts. */
function decideWithFacts(rules, server, tool, effect, facts) {
  const [verdictOfTables, source] = verdict(rules, server, tool, effect);
  if (verdictOfTables === "deny") return { tag: "deny", val: `effect \`${effect}\` is denied by ${source}` };
  const serverRules = rules.servers.get(server);
  const toolRuleFound = serverRules?.tools.get(tool);
  const scopes = [];
  if (toolRuleFound) scopes.push([toolRuleFound.limits, "tool", `tool \`${tool}\` of server \`${server}\``]);
  if (serverRules) scopes.push([serverRules.limits, "server", `server \`${server}\``]);
  for (const [limits, scope, what] of scopes) {
    for (const limit of limits) {
      if (limit.counted === "held" && verdictOfTables !== "hold") continue;
      const name = `${scope}.${limit.counted}.${limit.per}`;
      const fact = facts.find((f) => f.name === name);
      const shown = limitText(limit);
      if (fact === undefined) {
        return { tag: "deny", val: `limit \`${shown}\` on ${what} cannot be checked: the host gave no fact \`${name}\`` };
      }
      const count = parseCount(fact.value);
      if (count === null) {
        return {
          tag: "deny",
          val: `limit \`${shown}\` on ${what} cannot be checked: fact \`${name}\` is not a non-negative integer`,
        };
      }
      if (count >= limit.max) {
        return { tag: "deny", val: `limit \`${shown}\` on ${what} reached: ${count} in the last ${limit.per}` };
      }
    }
  }
  return verdictOfTables === "allow"
    ? { tag: "allow" }
    : { tag: "hold", val: `effect \`${effect}\` needs approval by ${source}` };
}

// ---------------------------------------------------------------------------------------
// Paths: whether a path argument stays inside `write_root`, decided lexically (the
// component has no filesystem, so it cannot resolve symlinks). See
// examples/custom-policy/src/path.rs for the reasoning behind each refusal.

/** Rust's `char::is_control`: the Unicode category Cc. */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/u;

/** Rust's `str::escape_debug`, for a path in a reason. */
function escapeDebug(text) {
  let out = "";
  for (const c of text) {
    if (c === "\\") out += "\\\\";
    else if (c === '"') out += '\\"';
    else if (c === "'") out += "\\'";
    else if (c === "\t") out += "\\t";
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (CONTROL.test(c)) out += `\\u{${c.codePointAt(0).toString(16)}}`;
    else out += c;
  }
  return out;
}

/** Appends the components of `path` to `out`, a list of names (empty meaning the root). */
function pushComponents(out, path) {
  for (const component of path.split("/")) {
    if (component === "" || component === ".") continue;
    if (component === "..") out.pop();
    else out.push(component);
  }
}

/** The lexical normal form of `path`, taken relative to `base` when not absolute. */
function normalise(base, path) {
  const out = [];
  if (!path.startsWith("/")) pushComponents(out, base);
  pushComponents(out, path);
  return `/${out.join("/")}`;
}

/** Whether the normalised `path` is `root` or below it (a prefix of a name does not count). */
function within(root, path) {
  if (root === "/") return true;
  if (!path.startsWith(root)) return false;
  const rest = path.slice(root.length);
  return rest === "" || rest.startsWith("/");
}

/** `null` when `path` resolves to `root` or below it; otherwise the fault. */
function checkPath(root, path) {
  if (path === "") return "the path is empty";
  if (path.includes("\\") || CONTROL.test(path)) {
    return `path \`${escapeDebug(path)}\` holds a backslash or a control character, which servers read differently`;
  }
  if (path.startsWith("~")) return `path \`${path}\` starts with \`~\`, which servers expand to a home directory`;
  if (path.slice(0, 5).toLowerCase() === "file:") return `path \`${path}\` is a \`file:\` URL, not a path`;
  const resolved = normalise(root, path);
  return within(root, resolved) ? null : `path \`${path}\` resolves to \`${resolved}\`, which leaves the write root \`${root}\``;
}

// ---------------------------------------------------------------------------------------
// URLs: the host of a URL argument, read by hand and strictly (only the shape on which URL
// parsers agree; examples/custom-policy/src/url.rs says why each refusal is there).

const asciiLower = (text) => text.replace(/[A-Z]/g, (c) => c.toLowerCase());

/** `{ host }` (original case, one trailing `.` dropped) or `{ fault }`, worded to follow "URL `...`". */
function urlHost(url) {
  if (url.includes("\\") || url.includes(" ") || CONTROL.test(url)) {
    return { fault: "holds a backslash, a space or a control character" };
  }
  const colon = url.indexOf(":");
  if (colon < 0) return { fault: "has no scheme" };
  const scheme = url.slice(0, colon);
  if (!["http", "https"].includes(asciiLower(scheme))) {
    return { fault: `has scheme \`${scheme}\`; only \`http\` and \`https\` are read` };
  }
  const rest = url.slice(colon + 1);
  if (!rest.startsWith("//")) return { fault: "has no `//` before its host" };
  const after = rest.slice(2);
  const end = after.search(/[/?#]/);
  const authority = end < 0 ? after : after.slice(0, end);
  if (authority.includes("@")) {
    return { fault: "carries userinfo (an `@` before the host), which can disguise the host" };
  }
  let host;
  let port = null;
  if (authority.startsWith("[")) {
    const close = authority.indexOf("]");
    if (close < 0) return { fault: "has an IPv6 host without its closing `]`" };
    host = authority.slice(0, close + 1);
    const inner = host.slice(1, -1);
    if (inner === "" || !/^[0-9A-Fa-f:.]+$/.test(inner)) return { fault: `has an unreadable IPv6 host \`${host}\`` };
    const tail = authority.slice(close + 1);
    if (tail !== "") {
      if (!tail.startsWith(":")) return { fault: `has \`${tail}\` after its IPv6 host` };
      port = tail.slice(1);
    }
  } else {
    const portColon = authority.indexOf(":");
    host = portColon < 0 ? authority : authority.slice(0, portColon);
    if (portColon >= 0) port = authority.slice(portColon + 1);
  }
  if (port !== null && !(/^[0-9]{1,5}$/.test(port) && Number(port) <= 65535)) {
    return { fault: `has port \`${port}\`, which is not a number up to 65535` };
  }
  if (host.startsWith("[")) return { host };
  if (host.endsWith(".")) host = host.slice(0, -1);
  if (host === "") return { fault: "has no host" };
  if (!/^[A-Za-z0-9._-]+$/.test(host) || host.startsWith(".") || host.includes("..")) {
    return {
      fault: `has host \`${host}\`, which is not a plain DNS name (use the \`xn--\` form for an international name)`,
    };
  }
  return { host };
}

// ---------------------------------------------------------------------------------------
// Settings (the same shape as examples/custom-policy/src/settings.rs).

function names(map, key, fallback) {
  if (!(key in map)) return fallback;
  const value = map[key];
  if (!Array.isArray(value)) throw new Error(`${key}: expected an array of strings`);
  return value.map((item, i) => {
    if (typeof item !== "string" || item === "") throw new Error(`${key}[${i}]: expected a non-empty string`);
    return item;
  });
}

function parseSettings(text) {
  let root;
  try {
    root = JSON.parse(text);
  } catch (error) {
    throw new Error(`(root): not valid JSON: ${error.message}`);
  }
  if (typeName(root) !== "an object") throw new Error("(root): expected an object of settings");
  const unknown = Object.keys(root).find((k) => !SETTINGS_KEYS.includes(k));
  if (unknown !== undefined) throw new Error(`\`${unknown}\`: unknown key (expected one of ${SETTINGS_KEYS.join(", ")})`);
  let rules = { servers: new Map(), decisions: {} };
  if ("rules" in root) {
    if (typeName(root.rules) !== "an object") throw new Error("rules: expected a rules object");
    try {
      rules = parseRules(root.rules);
    } catch (fault) {
      throw new Error(fault.message.startsWith("(root): ") ? `rules: ${fault.message.slice(8)}` : `rules.${fault.message}`);
    }
  }
  const root_ = root.write_root;
  if (root_ === undefined) throw new Error("write_root: missing (the directory writes must stay in)");
  if (typeof root_ !== "string") throw new Error("write_root: expected an absolute path");
  if (!root_.startsWith("/") || root_.includes("\\")) {
    throw new Error(`write_root: expected an absolute path, found \`${root_}\``);
  }
  return {
    rules,
    writeRoot: normalise("/", root_),
    pathArguments: names(root, "path_arguments", ["path"]),
    allowedHosts: names(root, "allowed_hosts", []).map((host) => {
      const lower = asciiLower(host);
      return lower.endsWith(".") ? lower.slice(0, -1) : lower;
    }),
    urlArguments: names(root, "url_arguments", ["url"]),
  };
}

// ---------------------------------------------------------------------------------------
// The decision.

const RANK = { allow: 0, hold: 1, deny: 2 };

/** The stricter of the check's answer and the table's; on a tie the check's (its reason is the more specific). */
function stricter(own, tableDecision) {
  return own !== null && RANK[own.tag] >= RANK[tableDecision.tag] ? own : tableDecision;
}

/** The asked-for top-level members of the arguments object, in the order they appear; `null` when not an object. */
function members(call, wanted) {
  let args;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    return null;
  }
  if (typeName(args) !== "an object") return null;
  return Object.keys(args)
    .filter((key) => wanted.includes(key))
    .map((key) => [key, args[key]]);
}

const unreadable = (call) => ({
  tag: "deny",
  val: `the arguments of tool \`${call.tool}\` of server \`${call.server}\` are not a JSON object`,
});
const argument = (name, call) => `argument \`${name}\` of tool \`${call.tool}\` of server \`${call.server}\``;

/** Denies the call when any path argument is not a string or leaves `write_root`. */
function checkPaths(settings, call) {
  const found = members(call, settings.pathArguments);
  if (found === null) return unreadable(call);
  for (const [name, value] of found) {
    if (typeof value !== "string") {
      return { tag: "deny", val: `${argument(name, call)} is ${typeName(value)}, not a path` };
    }
    const fault = checkPath(settings.writeRoot, value);
    if (fault !== null) return { tag: "deny", val: `${argument(name, call)}: ${fault}` };
  }
  return null;
}

/** Holds the call when a URL's host is off the allowlist; denies it when a URL is not a string or unreadable. */
function checkUrls(settings, call) {
  const found = members(call, settings.urlArguments);
  if (found === null) return unreadable(call);
  let hold = null;
  for (const [name, value] of found) {
    if (typeof value !== "string") {
      return { tag: "deny", val: `${argument(name, call)} is ${typeName(value)}, not a URL` };
    }
    const { host, fault } = urlHost(value);
    if (fault !== undefined) return { tag: "deny", val: `${argument(name, call)}: URL \`${value}\` ${fault}` };
    if (hold === null && !settings.allowedHosts.includes(asciiLower(host))) {
      hold = {
        tag: "hold",
        val: `${argument(name, call)} names host \`${asciiLower(host)}\`, which is not on the allowlist`,
      };
    }
  }
  return hold;
}

/**
 * One decision of each effect inside `configure`, before the host snapshots the instance.
 * SpiderMonkey compiles a function to bytecode the first time it runs; without this, every
 * decision's fresh instance would compile `decide` and what it calls again. The decisions
 * read the settings and change nothing, so the snapshot holds the same state, only compiled.
 */
function warmUp() {
  for (const effect of EFFECTS) {
    policy.decide({
      id: "warm-up",
      server: "warm-up",
      tool: "warm-up",
      effect,
      arguments: '{"path":"warm-up","url":"https://warm-up.invalid/"}',
      argumentsSha256: "",
      principal: "warm-up",
      session: "",
      timeMs: 0n,
      facts: [],
    });
  }
}

export const policy = {
  /** Parses the settings once; a fault refuses the start, naming its path. */
  configure(settings) {
    if (SETTINGS !== null) throw "configure was called twice";
    try {
      SETTINGS = parseSettings(settings);
    } catch (error) {
      throw error.message;
    }
    warmUp();
  },

  /** The decision on one call. */
  decide(call) {
    // Fail closed: without settings there is neither a root nor a table to allow from.
    if (SETTINGS === null) return { tag: "deny", val: "the policy was not configured" };
    const tableDecision = decideWithFacts(SETTINGS.rules, call.server, call.tool, call.effect, call.facts);
    let own = null;
    if (call.effect === "local-change" || call.effect === "destructive") own = checkPaths(SETTINGS, call);
    else if (call.effect === "remote-change") own = checkUrls(SETTINGS, call);
    return stricter(own, tableDecision);
  },
};
