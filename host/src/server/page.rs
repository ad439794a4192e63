//! The web view: runs, newest first, each linking to its record.

use axum::extract::State;
use axum::response::Html;

use super::App;
use super::error::ApiError;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) async fn index(State(app): State<App>) -> Result<Html<String>, ApiError> {
    let rt = &app.rt;
    let runs = rt.runs(None, None)?;
    let mut rows = String::new();
    for r in runs.iter().take(rt.config().web_view_runs) {
        rows.push_str(&format!(
            "<tr><td><a href=\"/runs/{id}\">{id}</a></td><td>{wf}</td><td class=\"{st}\">{st}</td><td>{at}</td><td><a href=\"/runs/{id}/events\">events</a></td></tr>\n",
            id = escape(&r.run_id),
            wf = escape(&r.workflow_id),
            st = r.status,
            at = crate::engine::rfc3339(r.updated_at),
        ));
    }
    Ok(Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>weft runs</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:left}}\
         .success{{color:green}}.failed,.tripwire{{color:#b00}}.suspended{{color:#a60}}</style></head>\
         <body><h1>weft runs</h1><p>{} runs in {}</p><table><tr><th>run</th><th>workflow</th>\
         <th>status</th><th>updated</th><th></th></tr>\n{rows}</table></body></html>",
        runs.len(),
        escape(&rt.home().display().to_string()),
    )))
}
