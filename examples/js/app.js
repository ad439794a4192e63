// @ts-check
// The weft tool plugin `slugify`, weft's example of a tool written in JavaScript: a WebAssembly
// component (world `tool-plugin-wasi` of `wit/`), built with jco (StarlingMonkey), that exports
// one tool, `slugify`, which turns a text into a URL slug.
//
// Build with `./build.sh`, run with `weft run workflow.yaml --input '{"text": "Hello, World!"}'`,
// or as part of ../polyglot.yaml.

import { Fail, log, tool } from './weft_sdk.js';

// The export the host calls: the tools registered below.
export { tools } from './weft_sdk.js';

/** The longest slug when the entry's config gives no `max-length`. */
const DEFAULT_MAX_LENGTH = 60;

/**
 * Runs once per call: `args` are the tool's arguments, `ctx.config` the entry's `config:`.
 * The result is the entry's output.
 *
 * @param {{text: string}} args
 * @param {import('./weft_sdk.js').ToolContext} ctx
 */
function slugifyTool(args, ctx) {
  const config = /** @type {{'max-length'?: unknown}} */ (ctx.config ?? {});
  const max = config['max-length'] ?? DEFAULT_MAX_LENGTH;
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1) {
    throw new Fail(`config max-length: expected a positive integer, got ${JSON.stringify(max)}`, {
      code: 'invalid-config',
    });
  }
  const result = slugify(args.text, max);
  log(`slugified ${args.text.length} characters into ${JSON.stringify(result)} (call ${ctx.callId})`);
  return { slug: result };
}

tool(
  'slugify',
  {
    description:
      'Turns {text} into {slug}: lowercase ASCII letters and digits joined by single hyphens ' +
      '(accents dropped), at most max-length (config, default 60) characters.',
    inputSchema: {
      type: 'object',
      required: ['text'],
      properties: { text: { type: 'string' } },
    },
    outputSchema: {
      type: 'object',
      required: ['slug'],
      properties: { slug: { type: 'string', pattern: '^([a-z0-9]+(-[a-z0-9]+)*)?$' } },
    },
  },
  slugifyTool,
);

/**
 * Latin letters with accents (and a few ligatures), lowercase, with what a slug spells them as.
 * A table rather than `text.normalize('NFKD')`: StarlingMonkey, the engine jco builds with, has
 * no `String.prototype.normalize`.
 * @type {Map<string, string>}
 */
const FOLD = new Map(
  [
    ['àáâãäåāăą', 'a'], ['çćĉċč', 'c'], ['ďđð', 'd'], ['èéêëēĕėęě', 'e'], ['ĝğġģ', 'g'],
    ['ĥħ', 'h'], ['ìíîïĩīĭįı', 'i'], ['ĵ', 'j'], ['ķ', 'k'], ['ĺļľŀł', 'l'], ['ñńņňŉ', 'n'],
    ['òóôõöøōŏő', 'o'], ['ŕŗř', 'r'], ['śŝşšș', 's'], ['ţťŧț', 't'], ['ùúûüũūŭůűų', 'u'],
    ['ŵ', 'w'], ['ýÿŷ', 'y'], ['źżž', 'z'], ['ß', 'ss'], ['æ', 'ae'], ['œ', 'oe'], ['þ', 'th'],
  ].flatMap(([letters, plain]) => [...letters].map((letter) => [letter, plain])),
);

/**
 * The tool's logic, in a plain function: "Crème brûlée, 2 ways!" gives "creme-brulee-2-ways".
 *
 * @param {string} text
 * @param {number} maxLength
 */
export function slugify(text, maxLength = DEFAULT_MAX_LENGTH) {
  const slug = [...text.toLowerCase()]
    .map((c) => FOLD.get(c) ?? c)
    .join('')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
  // Cut at maxLength, then drop a hyphen left at the end.
  return slug.slice(0, maxLength).replace(/-+$/, '');
}
