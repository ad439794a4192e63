//! Run tags: stored with a run and searched by on every store (`store_tests!`: the index of
//! runs by tag on sled, the GIN-indexed `tags` column on PostgreSQL), and given and searched
//! through `weft run --tag` / `weft runs --tag` and `POST /runs {"tags"}` / `GET /runs?tag=`.

use std::collections::BTreeMap;

use serde_json::Value;
use weft::RunStatus;
use weft::RunSummary;
use weft::internal::{Definition, NewRun, RunsPage, Store};

use crate::store_conformance::{pg_store, sled_store, store_tests};
use crate::torture::{Home, http, run_weft, serve};

store_tests!(
    a_page_of_a_tag_lists_exactly_the_runs_carrying_it_newest_first_and_pages_on,
    a_deleted_runs_tags_find_it_no_more,
);

/// Stores run `id` of workflow `w`, made at `at`, with `tags`, ended `success`.
fn create(store: &dyn Store, id: &str, w: &str, at: i64, tags: &[(&str, &str)]) {
    let mut summary = RunSummary {
        run_id: id.into(),
        workflow_id: w.into(),
        status: RunStatus::Pending,
        created_at: at,
        updated_at: at,
        tags: tags
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    store
        .create_run(NewRun {
            summary: &summary,
            definition: &Definition::new(b"definition".to_vec()),
            plugins: &[],
            base: b"{}",
            fresh_id: false,
        })
        .unwrap_or_else(|e| panic!("create {id}: {e}"));
    // A later summary (a status change) keeps the tags.
    summary.status = RunStatus::Success;
    store.put_summary(&summary).expect("summary");
}

/// The ids of a page of `tags` (and `workflow`), after `after`.
fn page(
    store: &dyn Store,
    workflow: Option<&str>,
    tags: &[(&str, &str)],
    after: Option<(i64, &str)>,
    limit: usize,
) -> Vec<String> {
    let tags: Vec<(String, String)> = tags
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    store
        .runs_page(&RunsPage {
            workflow,
            after,
            tags: &tags,
            limit,
        })
        .expect("page")
        .into_iter()
        .map(|s| s.run_id)
        .collect()
}

fn a_page_of_a_tag_lists_exactly_the_runs_carrying_it_newest_first_and_pages_on(store: &dyn Store) {
    create(store, "a1", "x", 1, &[("team", "a")]);
    create(store, "b1", "x", 2, &[("team", "b")]);
    create(store, "a2", "y", 3, &[("team", "a"), ("env", "prod")]);
    // Some in sled's tree, the rest pending in its log: a page merges both.
    store.checkpoint().expect("checkpoint");
    create(store, "none", "x", 4, &[]);
    create(store, "a3", "x", 5, &[("team", "a"), ("env", "dev")]);
    // A value that only starts like another's is another value.
    create(store, "ab", "x", 6, &[("team", "ab")]);
    assert_eq!(
        page(store, None, &[("team", "a")], None, 10),
        ["a3", "a2", "a1"]
    );
    assert_eq!(page(store, None, &[("team", "a")], None, 2), ["a3", "a2"]);
    assert_eq!(
        page(store, None, &[("team", "a")], Some((3, "a2")), 2),
        ["a1"]
    );
    assert_eq!(
        page(store, None, &[("team", "a"), ("env", "prod")], None, 10),
        ["a2"]
    );
    assert_eq!(
        page(store, Some("x"), &[("team", "a")], None, 10),
        ["a3", "a1"]
    );
    assert!(page(store, None, &[("team", "c")], None, 10).is_empty());
    assert_eq!(page(store, None, &[], None, 10).len(), 6);
    let read = store.summary("a2").expect("summary").expect("stored");
    assert_eq!(
        read.tags,
        BTreeMap::from([("env".into(), "prod".into()), ("team".into(), "a".into())])
    );
    assert_eq!(read.status, RunStatus::Success);
    let listed = store.runs().expect("runs");
    assert!(
        listed
            .iter()
            .any(|r| r.run_id == "a3" && r.tags["env"] == "dev")
    );
}

fn a_deleted_runs_tags_find_it_no_more(store: &dyn Store) {
    create(store, "gone", "x", 1, &[("team", "a")]);
    create(store, "kept", "x", 2, &[("team", "a")]);
    assert_eq!(store.delete_ended(&["gone"]).expect("delete"), ["gone"]);
    assert_eq!(page(store, None, &[("team", "a")], None, 10), ["kept"]);
}

const OK: &str = "id: ok\nsteps:\n  - map: { id: a, expr: '1' }\n";

#[test]
fn weft_run_tags_a_run_and_weft_runs_finds_it_by_its_tags() {
    let home = Home::new();
    let file = home.file("ok.yaml", OK);
    let file = file.to_str().expect("utf-8");
    let tagged = run_weft(
        &home.home(),
        &[
            "run",
            file,
            "--json",
            "--tag",
            "team:payments",
            "--tag",
            "url:https://x:1",
        ],
    );
    assert_eq!(tagged.code, 0, "{tagged:?}");
    let record: Value = serde_json::from_str(tagged.stdout.trim()).expect("a record");
    assert_eq!(record["tags"]["team"], "payments", "{record}");
    assert_eq!(record["tags"]["url"], "https://x:1");
    let other = run_weft(&home.home(), &["run", file, "--json"]);
    assert_eq!(other.code, 0, "{other:?}");
    let found = run_weft(&home.home(), &["runs", "--tag", "team:payments"]);
    assert_eq!(found.code, 0, "{found:?}");
    let lines: Vec<&str> = found.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(record["run_id"].as_str().expect("id")));
    assert!(lines[0].contains("team:payments"), "{}", lines[0]);
    let refused = run_weft(&home.home(), &["run", file, "--tag", "no value"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("key:value"), "{}", refused.stderr);
}

#[test]
fn post_runs_takes_tags_and_get_runs_filters_by_them_as_the_document_says() {
    let home = Home::new();
    let file = home.file("ok.yaml", OK);
    let (_server, addr) = serve(&home.home(), file.parent().expect("dir"));
    let start = |body: &str| http(addr, "POST", "/runs?wait=true", body).expect("an answer");
    let (status, body) = start(r#"{"workflow":"ok","tags":{"team":"a","env":"prod"}}"#);
    assert_eq!(status, 200, "{body}");
    let record: Value = serde_json::from_str(&body).expect("a record");
    let tagged = record["run_id"].as_str().expect("id").to_owned();
    assert_eq!(record["tags"]["env"], "prod", "{record}");
    assert_eq!(start(r#"{"workflow":"ok","tags":{"team":"b"}}"#).0, 200);
    let (status, body) = start(r#"{"workflow":"ok","tags":{"bad key":"x"}}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid-tag"), "{body}");
    let (status, body) = http(addr, "GET", "/runs?tag=team:a,env:prod", "").expect("an answer");
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).expect("a page");
    let runs = page["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{page}");
    assert_eq!(runs[0]["run_id"], tagged.as_str());
    assert_eq!(runs[0]["tags"]["team"], "a");
    let (status, body) = http(addr, "GET", "/runs?tag=novalue", "").expect("an answer");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid-tag"), "{body}");
    let (_, doc) = http(addr, "GET", "/openapi.json", "").expect("the document");
    let doc: Value = serde_json::from_str(&doc).expect("JSON");
    let params = doc["paths"]["/runs"]["get"]["parameters"]
        .as_array()
        .expect("parameters");
    assert!(params.iter().any(|p| p["name"] == "tag"), "{params:?}");
    let body = &doc["components"]["schemas"]["StartBody"];
    assert!(body.to_string().contains("\"maxProperties\":16"), "{body}");
}
