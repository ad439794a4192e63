//! The script a model double replays: conversations keyed by their first user message, each a
//! list of turns (docs/MODEL-DOUBLE.md).

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// The largest script file read, in bytes.
const MAX_SCRIPT_BYTES: u64 = 16 << 20;

/// A scripted set of conversations, checked and ready to serve.
#[derive(Debug, Clone)]
pub struct Script {
    pub(crate) conversations: Vec<Conversation>,
    /// The model names `GET /v1/models` lists, in order: the script's `models`, or
    /// [`DEFAULT_MODEL`] alone.
    pub(crate) models: Vec<String>,
}

/// The model a request without `model` is answered as, and the one `GET /v1/models` lists
/// when the script names none.
pub(crate) const DEFAULT_MODEL: &str = "weft-double";

/// One conversation: the first user message it answers and its turns, in order.
#[derive(Debug, Clone)]
pub(crate) struct Conversation {
    /// The exact text of the request's first user message.
    pub(crate) first_user: String,
    /// Turn `k` answers a request that already holds `k` assistant messages.
    pub(crate) turns: Vec<Turn>,
}

/// One scripted assistant reply, and how to deliver it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Turn {
    pub(crate) text: Option<String>,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) usage: Usage,
    /// An HTTP error status to answer with instead (the first `fail_times` times).
    pub(crate) status: Option<u16>,
    pub(crate) retry_after_s: Option<u64>,
    pub(crate) retry_after_ms: Option<u64>,
    /// How many requests get `status` before the reply is given; `None`: all of them.
    pub(crate) fail_times: Option<u32>,
    /// Stream this many characters of the text, then an error.
    pub(crate) error_after_chars: Option<usize>,
    /// Send the first part of the stream, then wait for a release.
    pub(crate) hold: bool,
    pub(crate) quirks: Quirks,
}

/// One tool call of a turn.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: Value,
}

/// The token counts a turn reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

/// Unusual stream framings a turn asks for (each off by default).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Quirks {
    /// OpenAI: every tool-call fragment repeats `id`, `type` and `function.name`.
    pub(crate) repeat_id: bool,
    /// OpenAI: tool-call fragments carry no `index`.
    pub(crate) missing_index: bool,
    /// OpenAI: the usage chunk has `"choices": null` instead of `[]`.
    pub(crate) choices_null_usage: bool,
    /// Both: each SSE frame is written in two pieces split mid-line.
    pub(crate) split_frames: bool,
    /// Both: `: keep-alive` comment lines between frames.
    pub(crate) keepalive: bool,
}

/// The quirk names a script may give, for error messages.
const QUIRKS: &str =
    "id_only_first, repeat_id, missing_index, choices_null_usage, split_frames, keepalive";

/// Why a script was refused: what is wrong, where, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// The whole explanation, one sentence or two.
    pub message: String,
}

impl std::fmt::Display for ScriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScriptError {}

fn refuse(message: String) -> ScriptError {
    ScriptError { message }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    conversations: Option<Vec<RawConversation>>,
    models: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConversation {
    #[serde(rename = "match")]
    first_user: Option<String>,
    turns: Option<Vec<RawTurn>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTurn {
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<RawToolCall>,
    usage: Option<RawUsage>,
    status: Option<u16>,
    retry_after_s: Option<u64>,
    retry_after_ms: Option<u64>,
    fail_times: Option<u32>,
    error_after_chars: Option<usize>,
    #[serde(default)]
    hold: bool,
    #[serde(default)]
    quirks: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolCall {
    id: Option<String>,
    name: Option<String>,
    arguments: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl Script {
    /// Reads and checks a script from YAML text. A refusal names the problem, where it is
    /// (`conversations[1].turns[0]`, or the line and column of a YAML error) and the fix.
    pub fn from_yaml(text: &str) -> Result<Script, ScriptError> {
        let mut options = serde_saphyr::Options::default();
        options.strict_booleans = true;
        let raw: RawScript = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
            let e = e.to_string();
            let e = e.strip_prefix("error: ").unwrap_or(&e);
            refuse(format!(
                "the model script is not valid (the format is in docs/MODEL-DOUBLE.md): {e}"
            ))
        })?;
        let raw_models = raw.models;
        let Some(raw) = raw.conversations else {
            return Err(refuse(
                "the model script has no `conversations`: give a list, e.g. `conversations: [{ match: \"hi\", turns: [{ text: \"hello\" }] }]`".into(),
            ));
        };
        let mut conversations: Vec<Conversation> = Vec::with_capacity(raw.len());
        for (c, conv) in raw.into_iter().enumerate() {
            let at = format!("conversations[{c}]");
            let Some(first_user) = conv.first_user else {
                return Err(refuse(format!(
                    "{at} has no `match`: give the exact text of the first user message it answers, e.g. `match: \"What is 2+3?\"`"
                )));
            };
            if let Some(before) = conversations
                .iter()
                .position(|k| k.first_user == first_user)
            {
                return Err(refuse(format!(
                    "{at} matches {first_user:?}, as conversations[{before}] already does: a first user message picks one conversation; merge their turns or change one `match`"
                )));
            }
            let Some(raw_turns) = conv.turns.filter(|t| !t.is_empty()) else {
                return Err(refuse(format!(
                    "{at} (match {first_user:?}) has no `turns`: give at least one, e.g. `turns: [{{ text: \"hello\" }}]`"
                )));
            };
            let mut turns = Vec::with_capacity(raw_turns.len());
            for (t, turn) in raw_turns.into_iter().enumerate() {
                turns.push(check_turn(turn, &format!("{at}.turns[{t}]"), t)?);
            }
            conversations.push(Conversation { first_user, turns });
        }
        if conversations.is_empty() {
            return Err(refuse(
                "the model script's `conversations` is empty: give at least one".into(),
            ));
        }
        let models = check_models(raw_models)?;
        Ok(Script {
            conversations,
            models,
        })
    }

    /// Reads and checks the script in the file at `path` (see [`Script::from_yaml`]); a
    /// refusal names the file.
    pub fn from_file(path: &Path) -> Result<Script, ScriptError> {
        let unreadable = |e: &dyn std::fmt::Display| {
            refuse(format!(
                "cannot read the model script {}: {e}",
                path.display()
            ))
        };
        let meta = std::fs::metadata(path).map_err(|e| unreadable(&e))?;
        if meta.len() > MAX_SCRIPT_BYTES {
            return Err(unreadable(&format!(
                "it is larger than {} MiB",
                MAX_SCRIPT_BYTES >> 20
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(&e))?;
        Script::from_yaml(&text).map_err(|e| refuse(format!("{}: {}", path.display(), e.message)))
    }
}

/// The script's `models`, each a non-empty name given once; none given: [`DEFAULT_MODEL`].
fn check_models(raw: Option<Vec<String>>) -> Result<Vec<String>, ScriptError> {
    let Some(raw) = raw else {
        return Ok(vec![DEFAULT_MODEL.to_owned()]);
    };
    if raw.is_empty() {
        return Err(refuse(
            "the model script's `models` is empty: name at least one model for `GET /v1/models`, e.g. `models: [gpt-test]`, or leave it out".into(),
        ));
    }
    for (i, name) in raw.iter().enumerate() {
        if name.trim().is_empty() {
            return Err(refuse(format!(
                "models[{i}] is empty: give a model name, e.g. `gpt-test`"
            )));
        }
        if let Some(before) = raw[..i].iter().position(|m| m == name) {
            return Err(refuse(format!(
                "models[{i}] is {name:?}, as models[{before}] already is: name each model once"
            )));
        }
    }
    Ok(raw)
}

fn check_turn(raw: RawTurn, at: &str, index: usize) -> Result<Turn, ScriptError> {
    let mut quirks = Quirks::default();
    for q in &raw.quirks {
        match q.as_str() {
            // The default framing, accepted to say so explicitly.
            "id_only_first" => {}
            "repeat_id" => quirks.repeat_id = true,
            "missing_index" => quirks.missing_index = true,
            "choices_null_usage" => quirks.choices_null_usage = true,
            "split_frames" => quirks.split_frames = true,
            "keepalive" => quirks.keepalive = true,
            other => {
                return Err(refuse(format!(
                    "{at}: unknown quirk {other:?}: use one of {QUIRKS}"
                )));
            }
        }
    }
    if let Some(status) = raw.status
        && !(400..=599).contains(&status)
    {
        return Err(refuse(format!(
            "{at}: `status: {status}` is not an error status: give one from 400 to 599, or leave it out for a reply"
        )));
    }
    if raw.status.is_none() {
        for (name, given) in [
            ("retry_after_s", raw.retry_after_s.is_some()),
            ("retry_after_ms", raw.retry_after_ms.is_some()),
            ("fail_times", raw.fail_times.is_some()),
        ] {
            if given {
                return Err(refuse(format!(
                    "{at}: `{name}` is given without `status`: add the error status to answer with, e.g. `status: 429`"
                )));
            }
        }
    }
    let answers = raw.fail_times.is_some() || raw.status.is_none();
    if answers && raw.text.is_none() && raw.tool_calls.is_empty() {
        return Err(refuse(format!(
            "{at} has neither `text` nor `tool_calls`: give the assistant's reply (a turn that only fails needs `status` and no `fail_times`)"
        )));
    }
    if raw.error_after_chars.is_some() && raw.text.is_none() {
        return Err(refuse(format!(
            "{at}: `error_after_chars` needs a `text` to stream before the error"
        )));
    }
    let mut tool_calls = Vec::with_capacity(raw.tool_calls.len());
    for (i, call) in raw.tool_calls.into_iter().enumerate() {
        let Some(name) = call.name.filter(|n| !n.is_empty()) else {
            return Err(refuse(format!(
                "{at}.tool_calls[{i}] has no `name`: give the tool to call, e.g. `{{ name: add, arguments: {{ a: 2 }} }}`"
            )));
        };
        let arguments = call
            .arguments
            .unwrap_or_else(|| Value::Object(Default::default()));
        if !arguments.is_object() {
            return Err(refuse(format!(
                "{at}.tool_calls[{i}] (`{name}`): `arguments` must be a mapping of the tool's input, e.g. `{{ a: 2, b: 3 }}`"
            )));
        }
        let id = call.id.unwrap_or_else(|| format!("call_{index}_{i}"));
        tool_calls.push(ToolCall {
            id,
            name,
            arguments,
        });
    }
    let usage = raw.usage.map_or_else(Usage::default, |u| Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
    });
    Ok(Turn {
        text: raw.text,
        tool_calls,
        usage,
        status: raw.status,
        retry_after_s: raw.retry_after_s,
        retry_after_ms: raw.retry_after_ms,
        fail_times: raw.fail_times,
        error_after_chars: raw.error_after_chars,
        hold: raw.hold,
        quirks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Script::from_yaml(text).expect_err("refused").message
    }

    #[test]
    fn a_full_script_reads() {
        let s = Script::from_yaml(
            r#"
conversations:
  - match: "What is 2+3?"
    turns:
      - text: "I'll add them."
        tool_calls:
          - { id: call_1, name: add, arguments: { a: 2, b: 3 } }
        usage: { input_tokens: 12, output_tokens: 7 }
      - { text: "It is 5.", quirks: [split_frames, keepalive], hold: true }
"#,
        )
        .expect("script");
        let turns = &s.conversations[0].turns;
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].tool_calls[0].arguments["b"], 3);
        assert_eq!(turns[0].usage.output_tokens, 7);
        assert!(turns[1].hold && turns[1].quirks.split_frames && turns[1].quirks.keepalive);
    }

    #[test]
    fn refusals_say_what_where_and_the_fix() {
        let e = err("conversations:\n  - turns: [{ text: hi }]\n");
        assert!(e.contains("conversations[0] has no `match`"), "{e}");
        let e = err("conversations:\n  - { match: a, turns: [{ text: hi, quirks: [odd] }] }\n");
        assert!(
            e.contains("conversations[0].turns[0]: unknown quirk \"odd\""),
            "{e}"
        );
        let e = err("conversations:\n  - { match: a, turns: [{ txt: hi }] }\n");
        assert!(e.contains("txt") && e.contains("line"), "{e}");
        let e = err("conversations: [\n");
        assert!(
            e.contains("not valid") && e.contains("MODEL-DOUBLE.md"),
            "{e}"
        );
        let e = err("conversations:\n  - { match: a, turns: [{ text: hi, status: 200 }] }\n");
        assert!(e.contains("not an error status"), "{e}");
        let e =
            err("conversations:\n  - { match: a, turns: [{ tool_calls: [{ arguments: {} }] }] }\n");
        assert!(e.contains("tool_calls[0] has no `name`"), "{e}");
        let e = err(
            "conversations:\n  - { match: a, turns: [{ text: x }] }\n  - { match: a, turns: [{ text: y }] }\n",
        );
        assert!(e.contains("conversations[1] matches \"a\""), "{e}");
        let e = err("conversations:\n  - { match: a, turns: [{ text: hi, retry_after_s: 1 }] }\n");
        assert!(
            e.contains("conversations[0].turns[0]") && e.contains("status: 429"),
            "{e}"
        );
        let e = err("models: [a, a]\nconversations: [{ match: a, turns: [{ text: b }] }]\n");
        assert!(
            e.contains("models[1] is \"a\", as models[0] already is"),
            "{e}"
        );
        let dir = tempfile::tempdir().expect("dir");
        let e = Script::from_file(&dir.path().join("absent.yaml")).expect_err("no file");
        assert!(e.message.contains("absent.yaml"), "{e}");
    }

    #[test]
    fn models_default_to_the_one_a_request_without_model_gets() {
        let s = Script::from_yaml("conversations: [{ match: a, turns: [{ text: b }] }]\n");
        assert_eq!(s.expect("script").models, [DEFAULT_MODEL]);
    }
}
