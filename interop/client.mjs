#!/usr/bin/env node
// client.mjs — test support for aguard (not part of its runtime).
//
// Runs the OFFICIAL AG-UI TypeScript client from npm, either @ag-ui/client
// 1.0.0 or the legacy 0.0.58 (installed under the alias agui-client-legacy),
// and reports what that client made of an event stream. Driven by the Go
// package internal/interop.
//
// Protocol: one JSON request on stdin, one JSON result on stdout. An array of
// requests gives an array of results, in order (they run one after another).
//
// Request:
//   mode       "live": the real HttpAgent POSTs to `url` with the real fetch.
//              "body": fetch is stubbed; the response is `body` (SSE text)
//              delivered as text/event-stream in `chunkSize`-byte reads.
//   client     "1.0.0" | "0.0.58"
//   url        live mode: the agent endpoint (body mode: optional, unused)
//   input      a RunAgentInput. threadId, messages and state become the agent's
//              own state; runId, tools, context, forwardedProps and resume are
//              passed to runAgent(). The client builds the POST body itself;
//              `requestBody` in the result is what it actually sent.
//   headers    extra request headers (HttpAgent `headers`)
//   body       body mode: the raw response text
//   chunkSize  body mode: bytes per read; <= 0 or absent means one read
//
// Result:
//   accepted     false when the client failed the run: its pipeline threw, the
//                request failed, or the transport synthesised a RUN_ERROR
//                (an aborted request). A RUN_ERROR carried by the stream does
//                not make a run unaccepted; see runError.
//   error        the message of the error that failed the run
//   runError     {code, message} of the first RUN_ERROR the stream carried
//   events       every event the client delivered to subscribers (expanded)
//   runs         one entry per RUN_STARTED: runId, the outcome the client
//                derived ({type, interrupts?}, null until RUN_FINISHED), the
//                pendingToolCallIds the client derived (1.0.0 only, else null)
//                and terminal ("RUN_FINISHED", "RUN_ERROR", or "" if none)
//   messages     agent.messages after the run
//   warnings     console.warn lines the client printed during the run
//   consoleErrors console.error lines the client printed during the run
//   requestBody  the JSON body the client POSTed (null if it sent none)
//
// A request the script itself cannot serve (bad JSON, unknown mode or client)
// exits with status 2 and a message on stderr.

import process from "node:process";

// ---------------------------------------------------------- console capture
// The clients report stripped material, translations and failures on the
// console. Capture it per request instead of letting it reach stdout/stderr.
let captured = { warn: [], error: [] };
console.warn = (...args) => captured.warn.push(args.map(formatArg).join(" "));
console.error = (...args) => captured.error.push(args.map(formatArg).join(" "));
// stdout carries only the result; anything else the clients print goes to stderr.
for (const level of ["log", "info", "debug"]) {
  console[level] = (...args) => process.stderr.write(args.map(formatArg).join(" ") + "\n");
}

function formatArg(a) {
  if (typeof a === "string") return a;
  if (a instanceof Error) return `${a.name}: ${a.message}`;
  try {
    return JSON.stringify(a);
  } catch {
    return String(a);
  }
}

// ------------------------------------------------------------------ clients
const packages = { "1.0.0": "@ag-ui/client", "0.0.58": "agui-client-legacy" };
const loaded = new Map();

async function loadClient(version) {
  const name = packages[version];
  if (!name) throw new UsageError(`unknown client ${JSON.stringify(version)}; want one of ${Object.keys(packages).join(", ")}`);
  if (!loaded.has(version)) loaded.set(version, await import(name));
  return loaded.get(version);
}

class UsageError extends Error {}

// ------------------------------------------------------------------- fetch
// A text/event-stream Response whose body yields `text` in `chunkSize`-byte
// reads, so framing across read boundaries is exercised as on a real socket.
function streamedResponse(text, chunkSize) {
  const bytes = new TextEncoder().encode(text);
  const n = chunkSize > 0 ? chunkSize : Math.max(bytes.length, 1);
  let offset = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) {
        controller.close();
        return;
      }
      controller.enqueue(bytes.slice(offset, offset + n));
      offset += n;
    },
  });
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
}

// ---------------------------------------------------------------- one run
function describeError(e) {
  if (e && Array.isArray(e.issues)) {
    // zod: a schema violation (0.0.58 transport, 1.0.0 enforcement)
    return e.issues
      .map((i) => `${i.path && i.path.length ? "/" + i.path.join("/") : "(event)"}: ${i.message}`)
      .join("; ");
  }
  if (e instanceof Error) return e.message || e.name;
  return String(e);
}

// JSON-safe copy of what the client delivered (a synthesised RUN_ERROR carries
// an Error object as rawEvent).
function plain(v) {
  return JSON.parse(JSON.stringify(v ?? null));
}

async function runOne(req) {
  if (req === null || typeof req !== "object" || Array.isArray(req)) throw new UsageError("a request must be a JSON object");
  if (req.mode !== "live" && req.mode !== "body") throw new UsageError(`unknown mode ${JSON.stringify(req.mode)}; want "live" or "body"`);
  if (req.mode === "live" && typeof req.url !== "string") throw new UsageError("live mode needs a url");
  if (req.mode === "body" && typeof req.body !== "string") throw new UsageError("body mode needs a body (string)");
  const { HttpAgent } = await loadClient(req.client);
  const input = req.input ?? {};

  captured = { warn: [], error: [] };
  const result = {
    accepted: true,
    error: "",
    runError: null,
    events: [],
    runs: [],
    messages: [],
    warnings: captured.warn,
    consoleErrors: captured.error,
    requestBody: null,
  };
  let failure = null;
  const fail = (e) => {
    failure = failure ?? e;
  };

  const fetchImpl = async (url, init) => {
    try {
      result.requestBody = JSON.parse(init.body);
    } catch {
      result.requestBody = init?.body ?? null;
    }
    if (req.mode === "body") return streamedResponse(req.body, req.chunkSize ?? 0);
    return fetch(url, init);
  };

  const agent = new HttpAgent({
    url: req.url ?? "http://interop.invalid/agent",
    headers: req.headers ?? {},
    ...(input.threadId !== undefined && { threadId: input.threadId }),
    ...(input.messages !== undefined && { initialMessages: input.messages }),
    ...(input.state !== undefined && { initialState: input.state }),
    fetch: fetchImpl,
  });

  const parameters = {};
  for (const k of ["runId", "tools", "context", "forwardedProps", "resume"]) {
    if (input[k] !== undefined) parameters[k] = input[k];
  }

  const lastRun = () => result.runs[result.runs.length - 1];
  const subscriber = {
    onEvent: ({ event }) => {
      result.events.push(plain(event));
    },
    onRunStartedEvent: ({ event }) => {
      result.runs.push({ runId: event.runId ?? "", outcome: null, pendingToolCallIds: null, terminal: "" });
    },
    onRunFinishedEvent: (p) => {
      const run = lastRun();
      if (!run) return;
      run.terminal = "RUN_FINISHED";
      run.outcome = { type: p.outcome };
      if (p.outcome === "interrupt") run.outcome.interrupts = plain(p.interrupts);
      run.pendingToolCallIds = Array.isArray(p.pendingToolCallIds) ? [...p.pendingToolCallIds] : null;
    },
    onRunErrorEvent: ({ event }) => {
      // The transport turns an aborted request into a RUN_ERROR whose rawEvent
      // is the Error itself; nothing parsed off the wire can be an Error.
      if (event.rawEvent instanceof Error) {
        fail(new Error(`transport synthesised RUN_ERROR (${event.code}): ${event.message}`));
        return;
      }
      const run = lastRun();
      if (run && run.terminal === "") run.terminal = "RUN_ERROR";
      result.runError = result.runError ?? { code: event.code ?? "", message: event.message ?? "" };
    },
    // Called before runAgent decides whether to rethrow: an abort is swallowed
    // by runAgent and only visible here.
    onRunFailed: ({ error }) => fail(error),
  };

  try {
    await agent.runAgent(parameters, subscriber);
  } catch (e) {
    fail(e);
  }

  if (failure !== null) {
    result.accepted = false;
    result.error = describeError(failure);
    // runAgent logs "Agent execution failed:" before rethrowing; the error is
    // already reported above.
    result.consoleErrors = captured.error.filter((l) => !l.startsWith("Agent execution failed:"));
  }
  result.messages = plain(agent.messages);
  return result;
}

// ------------------------------------------------------------------- main
async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}

try {
  let parsed;
  try {
    parsed = JSON.parse(await readStdin());
  } catch (e) {
    throw new UsageError(`stdin is not JSON: ${e.message}`);
  }
  const batch = Array.isArray(parsed);
  const requests = batch ? parsed : [parsed];
  const results = [];
  for (const [i, req] of requests.entries()) {
    try {
      results.push(await runOne(req));
    } catch (e) {
      if (e instanceof UsageError && batch) e.message = `request ${i}: ${e.message}`;
      throw e;
    }
  }
  process.stdout.write(JSON.stringify(batch ? results : results[0]) + "\n");
} catch (e) {
  process.stderr.write(`interop/client.mjs: ${e instanceof UsageError ? e.message : e.stack ?? e}\n`);
  process.exitCode = 2;
}
