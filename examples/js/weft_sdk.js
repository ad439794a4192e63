// weft_sdk.js: the small glue between a JavaScript weft plugin and the host.
//
// It is plain JavaScript, part of this project: read it, change it, or copy it elsewhere. Its
// imports (`weft:plugin/...`, `wasi:cli/environment`) are the component's imports, which
// `jco componentize` wires to the host while it builds the component, so it runs inside weft
// only. The types are in weft_sdk.d.ts.
//
// What it does:
//
// - `step(name, options, fn)` and `tool(name, options, fn)` register a function as a step or a
//   tool, with its description and JSON Schemas (plain objects); `describe` lists what was
//   registered.
// - JSON in and out: the function gets the parsed input (a step) or arguments (a tool) and a
//   context, and returns anything `JSON.stringify` accepts, or a Promise of it (`suspend(...)`
//   or `bail(...)` too, from a step).
// - Failures: `throw new Fail(message, {code})` fails the step or tool with that code;
//   `throw new Tripwire(reason)` trips a guardrail. Any other uncaught exception fails it with
//   code `exception`, `Name: message` as the message, and `{type, stack}` in `details` (without
//   this, the host would get no code and no stack).
// - `write`, `custom`, `log`, `isAborted`, `abortReason`, `setState`, `initData` and
//   `stepResult` reach the host's `writer`, `log`, `abort` and `run` imports; `env` and
//   `environment` read the variables the workflow grants (`grants.env`).
//
// The app module (app.js) exports `steps` (world step-plugin-wasi) or `tools` (world
// tool-plugin-wasi): `export { steps } from './weft_sdk.js';` is all it takes.
//
// Top-level code (this module's and app.js's) runs once, while the component is built: the
// component is a snapshot of the initialised JavaScript engine. There, `Date.now()` is the
// build's time, and `Math.random()` or a host function (log, env, fetch...) fails the build.
// Read the environment, the clock, randomness or the network inside a step or tool.

import * as writer from 'weft:plugin/writer@0.1.0';
import * as logging from 'weft:plugin/log@0.1.0';
import * as abort from 'weft:plugin/abort@0.1.0';
import { getEnvironment } from 'wasi:cli/environment@0.2.0';
// The tool-plugin world has no `run` import (a step project's weft_sdk.js imports it here).
const run = null;

/** The JSON Schema dialect weft reads. */
export const SCHEMA = 'https://json-schema.org/draft/2020-12/schema';

/** The log levels of the host's `log` import. */
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

/** name -> {fn, info} */
const STEPS = new Map();
/** name -> {fn, info} */
const TOOLS = new Map();

/** A schema object as JSON text (with `$schema` set), or undefined. */
function schemaText(schema) {
  if (schema === undefined || schema === null) return undefined;
  return JSON.stringify({ $schema: SCHEMA, ...schema });
}

/** `JSON.stringify`, with `undefined` as `null`. */
function json(value) {
  const text = JSON.stringify(value);
  return text === undefined ? 'null' : text;
}

/** `(name, fn)` or `(name, options, fn)`: the options and the function. */
function optionsAndFn(what, name, options, fn) {
  if (typeof options === 'function' && fn === undefined) [options, fn] = [{}, options];
  if (typeof name !== 'string' || name === '') throw new TypeError(`${what}: the name must be a non-empty string`);
  if (typeof fn !== 'function') throw new TypeError(`${what} ${JSON.stringify(name)}: the last argument must be a function`);
  return [options ?? {}, fn];
}

/**
 * Registers `fn(input, ctx)` as the step `name`; it returns the step's output (or a Promise of
 * it, or `suspend(...)`, or `bail(...)`). Returns `fn`.
 */
export function step(name, options, fn) {
  [options, fn] = optionsAndFn('step', name, options, fn);
  if (STEPS.has(name)) throw new Error(`step ${JSON.stringify(name)} is registered twice`);
  const info = {
    name,
    description: options.description ?? '',
    inputSchema: schemaText(options.inputSchema),
    outputSchema: schemaText(options.outputSchema),
    suspendSchema: schemaText(options.suspendSchema),
    resumeSchema: schemaText(options.resumeSchema),
    configSchema: schemaText(options.configSchema),
  };
  STEPS.set(name, { fn, info });
  return fn;
}

/**
 * Registers `fn(args, ctx)` as the tool `name` ([a-zA-Z0-9_-], at most 64 characters); it
 * returns the tool's result (or a Promise of it). Returns `fn`.
 */
export function tool(name, options, fn) {
  [options, fn] = optionsAndFn('tool', name, options, fn);
  if (TOOLS.has(name)) throw new Error(`tool ${JSON.stringify(name)} is registered twice`);
  const info = {
    name,
    description: options.description ?? '',
    inputSchema: schemaText(options.inputSchema ?? { type: 'object' }),
    outputSchema: schemaText(options.outputSchema),
    needsApproval: Boolean(options.needsApproval),
  };
  TOOLS.set(name, { fn, info });
  return fn;
}

/** Throw to fail with a code; `retryable: true` lets the workflow's retry policy retry it. */
export class Fail extends Error {
  constructor(message, { code = 'failed', retryable = false, details } = {}) {
    super(message);
    this.name = 'Fail';
    this.code = code;
    this.retryable = retryable;
    this.details = details;
  }
}

/** Throw to trip a guardrail: the step fails, never retried, and the run ends `tripwire`. */
export class Tripwire extends Error {
  constructor(reason, { retry = false, metadata, processorId } = {}) {
    super(reason);
    this.name = 'Tripwire';
    this.reason = reason;
    this.retry = retry;
    this.metadata = metadata;
    this.processorId = processorId;
  }
}

/** What `suspend(...)` returns: pause the run until `weft resume` (then see `ctx.resume`). */
export class Suspend {
  constructor(payload, { labels = [] } = {}) {
    this.payload = payload;
    this.labels = [...labels];
  }
}

/** What `bail(...)` returns: end the whole run now, successfully, with `result`. */
export class Bail {
  constructor(result) {
    this.result = result;
  }
}

/** Return from a step to pause the run; `labels` are extra names a resume may use. */
export function suspend(payload, options) {
  return new Suspend(payload, options);
}

/** Return from a step to end the whole run now, successfully, with `result`. */
export function bail(result) {
  return new Bail(result);
}

/** Emits `value` (JSON-able) as a chunk of streamed output (`weft watch`). */
export function write(value) {
  writer.write(json(value));
}

/** Emits a custom event, e.g. `custom('progress', {done: 3, total: 10})`. */
export function custom(kind, data) {
  writer.custom(kind, json(data));
}

/** A log line kept with the run; level: trace, debug, info (the default), warn or error. */
export function log(message, level = 'info') {
  if (!LEVELS.includes(level)) {
    throw new TypeError(`log: unknown level ${JSON.stringify(level)}; one of ${LEVELS.join(', ')}`);
  }
  logging.log(level, String(message));
}

/** True once the run is cancelled or the attempt's deadline has passed: stop and return. */
export function isAborted() {
  return abort.isAborted();
}

/** Why the invocation was aborted, or null. */
export function abortReason() {
  return abort.reason() ?? null;
}

/** The value of the environment variable `name` when the workflow grants it, else undefined. */
export function env(name) {
  for (const [key, value] of getEnvironment()) {
    if (key === name) return value;
  }
  return undefined;
}

/** Every granted environment variable, as an object. */
export function environment() {
  return Object.fromEntries(getEnvironment());
}

/** The `run` import, or an error saying that tools have none. */
function runImport(what) {
  if (run === null) throw new Error(`${what}: only steps reach the run (a tool-plugin has no run import)`);
  return run;
}

/** Merges an object's top-level keys into the run's state when the step ends (steps only). */
export function setState(patch) {
  runImport('setState').setState(json(patch));
}

/** The workflow's input (steps only). */
export function initData() {
  return JSON.parse(runImport('initData').initData());
}

/** The output of a succeeded step of this run, by id or path; undefined if none (steps only). */
export function stepResult(stepId) {
  const out = runImport('stepResult').stepResult(stepId);
  return out === undefined || out === null ? undefined : JSON.parse(out);
}

/** A failure record of the `failure` type. */
function failure(message, code, { retryable = false, details, tripwire } = {}) {
  return {
    message: String(message),
    code,
    retryable: Boolean(retryable),
    details: details === undefined ? undefined : json(details),
    tripwire,
  };
}

/** Turns anything thrown into the host's failure record. */
function toFailure(error) {
  if (error instanceof Tripwire) {
    return failure(error.reason, 'tripwire', {
      tripwire: {
        reason: String(error.reason),
        retry: Boolean(error.retry),
        metadata: error.metadata === undefined ? undefined : json(error.metadata),
        processorId: error.processorId,
      },
    });
  }
  if (error instanceof Fail) {
    return failure(error.message, error.code, error);
  }
  const isError = error instanceof Error;
  const type = isError ? error.name : typeof error;
  const message = isError ? `${error.name}: ${error.message}` : String(error);
  const stack = isError && typeof error.stack === 'string' ? ownFrames(error.stack) : '';
  return failure(message, 'exception', { details: { type, stack } });
}

/** A stack without the frames below `runGuarded` (the bindings' glue, not the plugin's code). */
function ownFrames(stack) {
  const frames = stack.split('\n');
  const glue = frames.findIndex((frame) => frame.startsWith('runGuarded@'));
  return (glue === -1 ? frames : frames.slice(0, glue)).join('\n');
}

/** Runs `call()` (sync or async); a throw becomes the `result`'s error, a failure record. */
async function runGuarded(call) {
  try {
    return await call();
  } catch (error) {
    throw toFailure(error);
  }
}

/** The context a step function gets. */
function stepContext(raw) {
  const resume =
    raw.resume === undefined || raw.resume === null
      ? null
      : { data: JSON.parse(raw.resume.data), suspendPayload: JSON.parse(raw.resume.suspendPayload) };
  return {
    input: JSON.parse(raw.input),
    config: JSON.parse(raw.config),
    state: JSON.parse(raw.state),
    resume,
    attempt: raw.attempt,
    runId: raw.runId,
    workflowId: raw.workflowId,
    stepPath: raw.stepPath,
    foreachIndex: raw.foreachIndex ?? null,
    iteration: raw.iteration ?? null,
    raw,
  };
}

/** The `steps` export (world step-plugin-wasi): what the host calls. */
export const steps = {
  describe() {
    return [...STEPS.values()].map((s) => s.info);
  },
  execute(name, raw) {
    const registered = STEPS.get(name);
    if (registered === undefined) {
      throw failure(`no step named ${JSON.stringify(name)}`, 'unknown-step');
    }
    return runGuarded(async () => {
      const ctx = stepContext(raw);
      const out = await registered.fn(ctx.input, ctx);
      if (out instanceof Suspend) {
        return { tag: 'suspend', val: { payload: json(out.payload), labels: out.labels.map(String) } };
      }
      if (out instanceof Bail) return { tag: 'bail', val: json(out.result) };
      return { tag: 'done', val: json(out) };
    });
  },
};

/** The `tools` export (world tool-plugin-wasi): what the host calls. */
export const tools = {
  describe() {
    return [...TOOLS.values()].map((t) => t.info);
  },
  call(name, raw) {
    const registered = TOOLS.get(name);
    if (registered === undefined) {
      throw failure(`no tool named ${JSON.stringify(name)}`, 'unknown-tool');
    }
    return runGuarded(async () => {
      const ctx = {
        args: JSON.parse(raw.args),
        config: JSON.parse(raw.config),
        runId: raw.runId,
        callId: raw.callId,
        raw,
      };
      return json(await registered.fn(ctx.args, ctx));
    });
  },
};
