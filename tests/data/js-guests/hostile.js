// A hostile JavaScript policy for tests/all/hostile/js_guests.rs: its settings name, per
// tool, one thing to try (`MODE for TOOL`, one per line); a tool not named is allowed. Each
// access that can fail inside JavaScript is caught and the call denied with what the guest
// saw, so the test asserts what the guest got; what cannot be caught (a trap, exhausted
// fuel or memory) is the host's to deny.
let PLAN = null;

/** What an attempt gave: its value, or the error it threw. */
function attempt(what) {
  try {
    return `returned ${String(what())}`;
  } catch (error) {
    return `threw ${error && error.name}: ${error && error.message}`;
  }
}

const MODES = {
  env: () => attempt(() => JSON.stringify(process.env)),
  file: () => attempt(() => require("fs").readFileSync("/etc/passwd", "utf8")),
  fetch: () => attempt(() => fetch("http://127.0.0.1:9/")),
  clock: () => attempt(() => Date.now()),
  random: () => attempt(() => Math.random()),
  loop: () => {
    for (;;) {}
  },
  // Ever larger buffers, from 64 MiB up, all kept: past the memory limit at the first.
  // (Many small ones would run out of fuel first: the engine's allocator is not free.)
  alloc: () => {
    const hoard = [];
    for (let mib = 64; ; mib *= 2) hoard.push(new ArrayBuffer(mib << 20));
  },
};

export const policy = {
  configure(settings) {
    PLAN = new Map();
    for (const line of settings.split("\n")) {
      const [mode, tool] = line.trim().split(" for ");
      if (!line.trim()) continue;
      if (!(mode in MODES) || !tool) throw `expected \`MODE for TOOL\` with a mode of ${Object.keys(MODES).join(", ")}, found \`${line}\``;
      PLAN.set(tool, mode);
    }
  },
  decide(call) {
    const mode = PLAN.get(call.tool);
    if (mode === undefined) return { tag: "allow" };
    return { tag: "deny", val: `${mode}: ${MODES[mode]()}` };
  },
};
