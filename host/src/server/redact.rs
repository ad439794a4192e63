//! What `GET /runs/{id}/workflow` leaves out of a stored definition, which anyone who may read
//! the server (no token needed) sees: literal `grants.env` values and model headers (API keys,
//! often) as `<redacted>`, and the host's absolute paths (the workflow files, the plugin
//! components, the granted directories) relative to the workflows directory when they lie in
//! it, else `<redacted>`. The names of host variables (`from-host`) are kept: they hold no
//! value.

use std::path::Path;

use serde_json::Value;

/// What a left-out value reads as.
pub(crate) const REDACTED: &str = "<redacted>";

/// `graph`, a serialized workflow graph, with its secrets and the host's paths left out; paths
/// inside `workflows` (canonical) are shown relative to it.
pub(crate) fn definition(graph: &mut Value, workflows: Option<&Path>) {
    if let Some(files) = graph.get_mut("files").and_then(Value::as_array_mut) {
        for file in files {
            path_member(file, "source", workflows);
        }
    }
    if let Some(plugins) = graph.get_mut("plugins").and_then(Value::as_object_mut) {
        for plugin in plugins.values_mut() {
            path_member(plugin, "source", workflows);
            let Some(grants) = plugin.pointer_mut("/sandbox/grants") else {
                continue;
            };
            if let Some(env) = grants.get_mut("env").and_then(Value::as_object_mut) {
                for value in env.values_mut() {
                    // A literal; `{ "from-host": NAME }` names a host variable and is kept.
                    if value.is_string() {
                        *value = REDACTED.into();
                    }
                }
            }
            if let Some(dirs) = grants.get_mut("dirs").and_then(Value::as_array_mut) {
                for dir in dirs {
                    path_member(dir, "host", workflows);
                }
            }
        }
    }
    if let Some(models) = graph.get_mut("models").and_then(Value::as_object_mut) {
        for model in models.values_mut() {
            if let Some(headers) = model.get_mut("headers").and_then(Value::as_object_mut) {
                for value in headers.values_mut() {
                    *value = REDACTED.into();
                }
            }
            if let Some(Value::String(url)) = model.get_mut("base-url") {
                *url = without_userinfo(url);
            }
        }
    }
    if let Some(tools) = graph
        .get_mut("workflow_tools")
        .and_then(Value::as_object_mut)
    {
        for tool in tools.values_mut() {
            definition(tool, workflows);
        }
    }
}

/// Replaces the path in `value[member]` with what may be shown of it.
fn path_member(value: &mut Value, member: &str, workflows: Option<&Path>) {
    if let Some(Value::String(path)) = value.get_mut(member) {
        *path = shown_path(path, workflows);
    }
}

/// `path` relative to `workflows` when it lies inside it (compared as written: the loader
/// stores the paths it was given, which the server gives canonical), else [`REDACTED`].
fn shown_path(path: &str, workflows: Option<&Path>) -> String {
    let relative = workflows
        .and_then(|dir| Path::new(path).strip_prefix(dir).ok())
        .filter(|rel| {
            rel.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
                && !rel.as_os_str().is_empty()
        });
    match relative {
        Some(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        None => REDACTED.into(),
    }
}

/// `url` without a user name and password (`https://user:key@host/` → `https://<redacted>@host/`).
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{REDACTED}{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_and_paths_outside_the_workflows_directory_are_left_out() {
        let mut graph = json!({
            "files": [{"source": "/srv/flows/sub/a.yaml"}, {"source": "/etc/b.yaml"}],
            "plugins": {"0/p": {
                "source": "/srv/flows/../p.wasm",
                "sandbox": {"grants": {
                    "env": {"K": "secret", "H": {"from-host": "HOST_K"}},
                    "dirs": [{"host": "/srv/flows/data", "guest": "/d"}, {"host": "/var/x", "guest": "/x"}]
                }}
            }},
            "models": {"0/m": {"base-url": "https://u:key@api.example/v1", "headers": {"x-key": "k"}}},
            "workflow_tools": {"t": {"files": [{"source": "/home/me/t.yaml"}]}}
        });
        definition(&mut graph, Some(Path::new("/srv/flows")));
        assert_eq!(
            graph,
            json!({
                "files": [{"source": "sub/a.yaml"}, {"source": REDACTED}],
                "plugins": {"0/p": {
                    "source": REDACTED,
                    "sandbox": {"grants": {
                        "env": {"K": REDACTED, "H": {"from-host": "HOST_K"}},
                        "dirs": [{"host": "data", "guest": "/d"}, {"host": REDACTED, "guest": "/x"}]
                    }}
                }},
                "models": {"0/m": {"base-url": "https://<redacted>@api.example/v1", "headers": {"x-key": REDACTED}}},
                "workflow_tools": {"t": {"files": [{"source": REDACTED}]}}
            })
        );
        assert_eq!(without_userinfo("http://h/a@b"), "http://h/a@b");
    }
}
