// Types of weft_sdk.js, for editors and `tsc --checkJs` (app.js starts with `// @ts-check`).
// The host's records are those of wit/plugin.wit as jco maps them: kebab-case names become
// camelCase, `option<T>` is `T | undefined`, JSON is text.

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A JSON Schema (draft 2020-12) as an object; the SDK adds `$schema`. */
export type JsonSchema = { [keyword: string]: unknown };

/** The JSON Schema dialect weft reads. */
export declare const SCHEMA: 'https://json-schema.org/draft/2020-12/schema';

/** How a step describes itself (`step-info`). */
export interface StepOptions {
  description?: string;
  inputSchema?: JsonSchema;
  outputSchema?: JsonSchema;
  configSchema?: JsonSchema;
  /** The schema of a `suspend(...)` payload. */
  suspendSchema?: JsonSchema;
  /** The schema of the data a resume gives (`ctx.resume.data`). */
  resumeSchema?: JsonSchema;
}

/** How a tool describes itself (`tool-info`), as an agent's model sees it. */
export interface ToolOptions {
  description?: string;
  /** Default `{type: 'object'}`. */
  inputSchema?: JsonSchema;
  outputSchema?: JsonSchema;
  /** A person must approve each call an agent's model makes. */
  needsApproval?: boolean;
}

/** The host's `step-context`, as the bindings give it (JSON as text). */
export interface RawStepContext {
  runId: string;
  workflowId: string;
  stepPath: string;
  attempt: number;
  input: string;
  config: string;
  state: string;
  resume?: { data: string; suspendPayload: string };
  foreachIndex?: number;
  iteration?: number;
}

/** The host's `tool-call`, as the bindings give it (JSON as text). */
export interface RawToolCall {
  runId: string;
  callId: string;
  args: string;
  config: string;
}

/** Set when the invocation resumes a suspension of this step. */
export interface Resumption<Data = any, Payload = any> {
  /** The data given by whoever resumed the run (`weft resume --data`). */
  data: Data;
  /** The payload this step suspended with. */
  suspendPayload: Payload;
}

/** Where a step invocation stands: its second argument. */
export interface StepContext<Input = any, Config = any, State = any> {
  /** The previous entry's output, the workflow input, or what the entry's `input:` made. */
  input: Input;
  /** The entry's `config:`, defaults filled. */
  config: Config;
  /** The run's shared state as it stood when the step started. */
  state: State;
  /** Set when resuming a suspension of this step, else null. */
  resume: Resumption | null;
  /** 0 on the first attempt, +1 on each retry. */
  attempt: number;
  runId: string;
  workflowId: string;
  /** The step's path in the workflow: ids joined by '.'. */
  stepPath: string;
  /** The item's index inside foreach, else null. */
  foreachIndex: number | null;
  /** The iteration (1-based) inside a loop, else null. */
  iteration: number | null;
  /** The host's record as the bindings give it. */
  raw: RawStepContext;
}

/** Where a tool call stands: its second argument. */
export interface ToolContext<Args = any, Config = any> {
  args: Args;
  /** The entry's `config:` (`{}` when absent). */
  config: Config;
  runId: string;
  /** Unique per call within the run. */
  callId: string;
  /** The host's record as the bindings give it. */
  raw: RawToolCall;
}

/** What a step function returns: its output (JSON-able), `suspend(...)` or `bail(...)`. */
export type StepReturn<Output> = Output | Suspend | Bail;

/** Registers `fn(input, ctx)` as the step `name`. Returns `fn`. */
export declare function step<Input = any, Output = any, Config = any, State = any>(
  name: string,
  options: StepOptions,
  fn: (
    input: Input,
    ctx: StepContext<Input, Config, State>,
  ) => StepReturn<Output> | Promise<StepReturn<Output>>,
): typeof fn;
export declare function step<Input = any, Output = any>(
  name: string,
  fn: (input: Input, ctx: StepContext<Input>) => StepReturn<Output> | Promise<StepReturn<Output>>,
): typeof fn;

/** Registers `fn(args, ctx)` as the tool `name` ([a-zA-Z0-9_-], at most 64 characters). */
export declare function tool<Args = any, Result = any, Config = any>(
  name: string,
  options: ToolOptions,
  fn: (args: Args, ctx: ToolContext<Args, Config>) => Result | Promise<Result>,
): typeof fn;
export declare function tool<Args = any, Result = any>(
  name: string,
  fn: (args: Args, ctx: ToolContext<Args>) => Result | Promise<Result>,
): typeof fn;

/** Throw to fail with a code (default `failed`); `retryable` lets the retry policy retry it. */
export declare class Fail extends Error {
  constructor(
    message: string,
    options?: { code?: string; retryable?: boolean; details?: { [key: string]: Json } },
  );
  code: string;
  retryable: boolean;
  details?: { [key: string]: Json };
}

/** Throw to trip a guardrail: the step fails, never retried, and the run ends `tripwire`. */
export declare class Tripwire extends Error {
  constructor(
    reason: string,
    options?: { retry?: boolean; metadata?: Json; processorId?: string },
  );
  reason: string;
  /** The caller may try again with changed input. */
  retry: boolean;
  metadata?: Json;
  processorId?: string;
}

/** What `suspend(...)` returns. */
export declare class Suspend {
  constructor(payload: Json, options?: { labels?: string[] });
  payload: Json;
  labels: string[];
}

/** What `bail(...)` returns. */
export declare class Bail {
  constructor(result: Json);
  result: Json;
}

/**
 * Return from a step to pause the run until `weft resume`; the step then runs again with
 * `ctx.resume` set. `labels` are extra names a resume may address it by.
 */
export declare function suspend(payload: Json, options?: { labels?: string[] }): Suspend;

/** Return from a step to end the whole run now, successfully, with `result`. */
export declare function bail(result: Json): Bail;

/** Emits `value` as a chunk of streamed output (`weft watch`). */
export declare function write(value: unknown): void;

/** Emits a custom event, e.g. `custom('progress', {done: 3, total: 10})`. */
export declare function custom(kind: string, data: unknown): void;

/** The log levels of the host's `log` import. */
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** A log line kept with the run (default level `info`); `console.log` lines are kept too. */
export declare function log(message: string, level?: LogLevel): void;

/** True once the run is cancelled or the attempt's deadline has passed: stop and return. */
export declare function isAborted(): boolean;

/** Why the invocation was aborted, or null. */
export declare function abortReason(): string | null;

/** The environment variable `name` when the workflow grants it (`grants.env`), else undefined. */
export declare function env(name: string): string | undefined;

/** Every granted environment variable. */
export declare function environment(): { [name: string]: string };

/** Merges an object's top-level keys into the run's state when the step ends (steps only). */
export declare function setState(patch: { [key: string]: unknown }): void;

/** The workflow's input (steps only). */
export declare function initData(): Json;

/** The output of a succeeded step of this run, by id or path; undefined if none (steps only). */
export declare function stepResult(step: string): Json | undefined;

/** The `steps` export (world step-plugin-wasi): `export { steps } from './weft_sdk.js'`. */
export declare const steps: {
  describe(): unknown[];
  execute(name: string, ctx: RawStepContext): unknown;
};

/** The `tools` export (world tool-plugin-wasi): `export { tools } from './weft_sdk.js'`. */
export declare const tools: {
  describe(): unknown[];
  call(name: string, call: RawToolCall): unknown;
};
