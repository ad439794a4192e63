"""The weft step plugin `wordstats`, weft's example of a step written in Python: a WebAssembly
component (world `step-plugin` of `wit/plugin.wit`), built with componentize-py, that exports
one step, `wordstats`, which counts the words and lines of a text and finds its most frequent
words.

Build with `./build.sh`, run with `weft run workflow.yaml --input '{"text": "a b a"}'`, or
as part of ../polyglot.yaml.
"""

import re
from collections import Counter

from weft_sdk import Fail, Steps, log, step, write  # noqa: F401 - Steps is the export

#: How many of the most frequent words `top` lists when the step's config says nothing.
DEFAULT_TOP = 3

#: A word: letters, digits, apostrophes (Unicode-aware, so "café" is one word).
WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


@step(
    "wordstats",
    description="Counts the words and lines of {text} and lists its most frequent words: "
    "{words, lines, top: [[word, count], ...]} (most frequent first, ties alphabetically). "
    "Writes a progress chunk of streamed output.",
    input_schema={
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string"}},
    },
    output_schema={
        "type": "object",
        "required": ["words", "lines", "top"],
        "properties": {
            "words": {"type": "integer", "minimum": 0},
            "lines": {"type": "integer", "minimum": 0},
            "top": {
                "type": "array",
                "items": {
                    "type": "array",
                    "prefixItems": [{"type": "string"}, {"type": "integer", "minimum": 1}],
                    "minItems": 2,
                    "maxItems": 2,
                },
            },
        },
    },
    config_schema={
        "type": "object",
        "properties": {"top": {"type": "integer", "minimum": 0, "default": DEFAULT_TOP}},
    },
)
def wordstats(input, ctx):
    """Runs once per invocation: `input` is the previous entry's output (or what the entry's
    `input:` made), `ctx.config` the entry's `config:`."""
    top = ctx.config.get("top", DEFAULT_TOP)
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise Fail(f"config top: expected a count, got {top!r}", code="invalid-config")
    stats = count(input["text"], top)
    # A chunk of streamed output (`weft watch`, the console), then a log line kept with the run.
    write({"progress": f"counted {stats['words']} words in {stats['lines']} lines"})
    log(f"{ctx.step_path} (run {ctx.run_id}, attempt {ctx.attempt}): {stats['words']} words")
    return stats


def count(text, top):
    """The step's logic, in a plain function: words (case-folded), lines, the `top` most
    frequent words with their counts."""
    words = [w.casefold() for w in WORD.findall(text)]
    ranked = sorted(Counter(words).items(), key=lambda wc: (-wc[1], wc[0]))
    return {
        "words": len(words),
        "lines": len(text.splitlines()),
        "top": [[w, c] for w, c in ranked[:top]],
    }
