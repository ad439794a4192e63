//! Hostile neighbours of model calls (issue 53): a run that plants a workflow tool's child
//! before the agent that would start it. Each case is refused, or ends with a clear error.

use serde_json::json;
use weft::{RunStatus, StepStatus};

use crate::common::{Env, model_double};
use crate::torture::{Home, run_weft};

/// A workflow tool's child: it ends with what it was given.
const REPORT: &str = r#"
id: report
steps:
  - map: { id: echo, expr: '{filed: .input.title}' }
"#;

/// The model calls `report` with id `c1`, then answers.
const FILES: &str = r#"
conversations:
  - match: "file it"
    turns:
      - tool_calls:
          - { id: c1, name: report, arguments: { title: "from the model" } }
      - text: "filed"
"#;

/// An agent `helper` offering `report.yaml`, at the top level or inside the parallel `g`.
fn filer(base: &str, nested: bool) -> String {
    let agent = r#"{ agent: { id: helper, model: m, input: '{prompt: "file it"}', tools: [ { workflow: { id: report, file: report.yaml }, description: "Files a report." } ] } }"#;
    let steps = if nested {
        format!("  - parallel: {{ id: g, steps: [ {agent} ] }}\n")
    } else {
        format!("  - {agent}\n")
    };
    format!(
        "id: filer\nmodels:\n  m: {{ api: openai-chat, base-url: \"{base}/v1\", model: scripted }}\nsteps:\n{steps}"
    )
}

#[tokio::test]
async fn a_run_id_in_a_workflow_tools_child_namespace_is_refused_from_outside() {
    let env = Env::new();
    let path = env.file("report.yaml", REPORT);
    let w = env.load(&path).await;
    let digest = format!("r1.{}", "0123456789abcdef".repeat(2));
    for id in [
        "r1.helper.tool-c1",
        "r1.g.helper.tool-c1.i0",
        digest.as_str(),
    ] {
        let err = env
            .rt
            .start(&w, json!({"title": "forged"}), Some(id.into()))
            .await
            .expect_err(id);
        let text = err.to_string();
        assert!(
            text.contains("workflow tool") && text.contains("child"),
            "{id}: the refusal says why: {text}"
        );
        assert!(env.rt.show(id).await.is_err(), "{id}: nothing was stored");
        let err = env
            .rt
            .start_and_wait(&w, json!({}), Some(id.into()))
            .await
            .expect_err(id);
        assert!(err.to_string().contains("workflow tool"), "{err}");
    }
    // An id with dots elsewhere is fine.
    let id = env
        .rt
        .start(&w, json!({"title": "x"}), Some("order-42.v1.2".into()))
        .await
        .expect("a dotted id outside the namespace");
    assert_eq!(
        env.rt.wait(&id).await.expect("wait").status,
        RunStatus::Success
    );

    // Over HTTP: a 400 saying why.
    let addr = crate::server::serve(&env).await;
    let (status, body) = crate::server::http(
        addr,
        "POST",
        "/runs",
        Some(json!({ "file": "report.yaml", "input": {}, "run_id": "h1.helper.tool-c1" })),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("workflow tool"), "{body}");
}

#[test]
fn the_cli_refuses_a_run_id_in_a_child_namespace() {
    let home = Home::new();
    let file = home.file("report.yaml", REPORT);
    let out = run_weft(
        &home.home(),
        &[
            "run",
            file.to_str().expect("UTF-8"),
            "--run-id",
            "r1.helper.tool-c1",
        ],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("workflow tool"), "{out:?}");
}

#[tokio::test]
async fn an_agent_adopts_no_child_that_another_run_started_under_its_id() {
    let base = model_double(FILES).await;
    let env = Env::new();
    env.file("report.yaml", REPORT);
    // Another run, `v.g`, whose top-level agent makes call c1: its child is `v.g.helper.tool-c1`,
    // the id the victim's agent at `g.helper` will make.
    let path = env.file("attacker.yaml", &filer(&base, false));
    let w = env.load(&path).await;
    let attacker = env
        .rt
        .start_and_wait(&w, json!({}), Some("v.g".into()))
        .await
        .expect("the other run");
    assert_eq!(attacker.status, RunStatus::Success, "{attacker:?}");
    let planted = "v.g.helper.tool-c1";
    assert_eq!(
        attacker.steps["helper.tool-c1"]
            .output
            .as_deref()
            .expect("a result")["run_id"],
        planted
    );

    let path = env.file("victim.yaml", &filer(&base, true));
    let w = env.load(&path).await;
    let victim = env
        .rt
        .start_and_wait(&w, json!({}), Some("v".into()))
        .await
        .expect("the victim");
    let call = &victim.steps["g.helper.tool-c1"];
    assert_eq!(call.status, StepStatus::Failed, "{victim:?}");
    let error = call.error.as_ref().expect("an error");
    assert_eq!(error.code, "child-not-started", "{error:?}");
    assert!(
        error.message.contains(planted) && error.message.contains("not the child of this call"),
        "{}",
        error.message
    );
    // The model was told, and answered; the planted child's result never reached it.
    assert_eq!(victim.status, RunStatus::Success, "{victim:?}");
    let out = victim.result.expect("an output");
    let told = out.to_string();
    assert!(!told.contains("\"filed\":\"from the model\""), "{told}");
    assert!(told.contains("child-not-started"), "{told}");
}
