//! How the OpenAPI document describes the engine's types. The engine knows nothing of utoipa:
//! each engine type the API shows (a run's status, its records, errors, tripwires, suspensions
//! and event kinds) gets its schema and its name here, member by member, in the words of its
//! doc comments.
//!
//! A schema must follow its type: the tests below fail when a type's members and its schema's
//! differ, or a value a schema lists is one the engine does not read.

use std::borrow::Cow;

use utoipa::openapi::schema::{
    ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, RefBuilder, Schema, SchemaFormat,
    SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::engine::{
    ErrorInfo, EventKind, ItemRecord, RestartedFrom, RunStatus, StepRecord, StepStatus,
    SuspendedEntry, TripwireInfo,
};

/// Gives each engine type its schema (the expression after `=`), its name (the type's own)
/// and the schemas it refers to (after `refers to`), which the document lists beside it.
macro_rules! describe {
    ($($ty:ident = $schema:expr $(, refers to $($used:ident),+)?;)*) => {$(
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                $schema
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($ty))
            }

            fn schemas(_schemas: &mut Vec<(String, RefOr<Schema>)>) {
                $($(register::<$used>(_schemas);)+)?
            }
        }
    )*};
}

describe! {
    EventKind = string_enum(
        "The kinds of tracking events (WORKFLOW-FORMAT.md §4).",
        &[
            "run-started", "step-started", "step-output", "step-custom", "step-progress",
            "step-succeeded", "step-failed", "step-retrying", "step-suspended", "step-waiting",
            "step-cancelled", "run-resumed", "run-succeeded", "run-failed", "run-suspended",
            "run-cancelled", "run-tripwire", "log",
        ],
    );
    RunStatus = string_enum(
        "Where a run stands (WORKFLOW-FORMAT.md §3).",
        &["pending", "running", "suspended", "success", "failed", "cancelled", "tripwire"],
    );
    StepStatus = string_enum(
        "Status of one entry's record.",
        &["success", "failed", "suspended", "running", "waiting", "skipped", "cancelled"],
    );
    ErrorInfo = object(
        "An error as records and events show it (S83).",
        &["message", "code", "step"],
        vec![
            ("message", plain(Type::String, "One line.")),
            ("code", plain(Type::String, "Machine-readable code.")),
            ("step", plain(Type::String, "The path where it arose.")),
            ("details", any("Structured details (an object).")),
            ("foreach_index", maybe_count("The foreach item it arose in.")),
            ("iteration", maybe_count("The loop iteration it arose in.")),
        ],
    );
    TripwireInfo = object(
        "A tripped guardrail as the run record shows it (S82, S112).",
        &["reason", "retry", "metadata"],
        vec![
            ("reason", plain(Type::String, "Why it tripped.")),
            ("retry", plain(Type::Boolean, "The caller may try again with changed input.")),
            ("metadata", any("Extra data.")),
            ("processor_id", maybe(Type::String, "Which guardrail.")),
        ],
    );
    ItemRecord = object(
        "One foreach item of a step inside a foreach body (S31).",
        &["index", "status", "input", "attempts"],
        vec![
            ("index", count("The item's index.")),
            ("status", named("StepStatus", "Where the item's execution of this step stands.")),
            ("input", any("What it received, shared with the run's state.")),
            ("output", any("What it produced, shared with the run's state.")),
            ("error", maybe_named("ErrorInfo", "Why it failed.")),
            ("attempts", count("Invocations of this execution.")),
        ],
    ), refers to StepStatus, ErrorInfo;
    StepRecord = object(
        "The record of one entry, keyed by path in the run record (S7).",
        &["status"],
        vec![
            ("status", named("StepStatus", "Where it stands.")),
            ("input", any("What it received, shared with the run's state.")),
            ("output", any("What it produced, shared with the run's state.")),
            ("error", maybe_named("ErrorInfo", "Why it failed.")),
            ("tripwire", maybe_named("TripwireInfo", "The tripwire it raised.")),
            ("attempts", maybe_count("Invocations of the latest execution (plugin steps only).")),
            ("bail", maybe(Type::Boolean, "Set when the step bailed.")),
            ("suspend_payload", any("The payload of its suspension.")),
            ("labels", strings(true, "The labels of its suspension.")),
            ("iteration", maybe_count("The iteration of the enclosing loop.")),
            ("items", maybe_list_of("ItemRecord", "Foreach items, for steps inside a foreach body.")),
            ("started_at", maybe(Type::String, "When it started (RFC 3339).")),
            ("suspended_at", maybe(Type::String, "When it last suspended.")),
            ("resumed_at", maybe(Type::String, "When it was last resumed.")),
            ("resume_data", any("The data of the last resume.")),
            ("ended_at", maybe(Type::String, "When it ended.")),
        ],
    ), refers to StepStatus, ErrorInfo, TripwireInfo, ItemRecord;
    RestartedFrom = object(
        "Where a re-run came from (S99).",
        &["run_id", "path"],
        vec![
            ("run_id", plain(Type::String, "The source run.")),
            ("path", plain(Type::String, "The step the new run starts from.")),
        ],
    );
    SuspendedEntry = object(
        "One suspended step or item as the run record lists it (S66, S112).",
        &["path", "labels", "payload"],
        vec![
            ("path", plain(Type::String, "The step's full path.")),
            ("labels", strings(false, "Its labels.")),
            ("payload", any("Exactly what it suspended with.")),
            ("foreach_index", maybe_count("The foreach item, if inside one.")),
        ],
    );
}

/// Lists `T`'s schema in the document, with the ones it refers to.
fn register<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

/// A string that is one of `values`.
fn string_enum(description: &str, values: &[&str]) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .enum_values(Some(values.iter().copied()))
        .into()
}

/// An object with these members, those named in `required` always present.
fn object(
    description: &str,
    required: &[&str],
    members: Vec<(&str, RefOr<Schema>)>,
) -> RefOr<Schema> {
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description));
    for name in required {
        object = object.required(*name);
    }
    for (name, schema) in members {
        object = object.property(name, schema);
    }
    object.into()
}

/// A member of type `ty`.
fn plain(ty: Type, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(ty)
        .description(Some(description))
        .into()
}

/// A member of type `ty` or `null`.
fn maybe(ty: Type, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([ty, Type::Null]))
        .description(Some(description))
        .into()
}

/// A member of any JSON value.
fn any(description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(description))
        .into()
}

/// A count (a `u32`).
fn count(description: &str) -> RefOr<Schema> {
    counting(SchemaType::Type(Type::Integer), description)
}

/// A count (a `u32`) or `null`.
fn maybe_count(description: &str) -> RefOr<Schema> {
    counting(
        SchemaType::from_iter([Type::Integer, Type::Null]),
        description,
    )
}

/// A count of this type: a 32-bit integer, at least 0.
fn counting(ty: SchemaType, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(ty)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
        .description(Some(description))
        .minimum(Some(0))
        .into()
}

/// A member described by the schema `name`.
fn named(name: &str, description: &str) -> RefOr<Schema> {
    RefBuilder::new()
        .ref_location_from_schema_name(name)
        .description(Some(description))
        .into()
}

/// A member described by the schema `name`, or `null`.
fn maybe_named(name: &str, description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .item(named(name, description))
        .into()
}

/// A list of strings, or (when `nullable`) `null`.
fn strings(nullable: bool, description: &str) -> RefOr<Schema> {
    let ty = if nullable {
        SchemaType::from_iter([Type::Array, Type::Null])
    } else {
        SchemaType::Type(Type::Array)
    };
    ArrayBuilder::new()
        .schema_type(ty)
        .items(ObjectBuilder::new().schema_type(Type::String))
        .description(Some(description))
        .into()
}

/// A list of values the schema `name` describes, or `null`.
fn maybe_list_of(name: &str, description: &str) -> RefOr<Schema> {
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(Ref::from_schema_name(name))
        .description(Some(description))
        .into()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use super::*;

    /// The schema of `T` as an object schema.
    fn object_of<T: PartialSchema>() -> utoipa::openapi::schema::Object {
        match T::schema() {
            RefOr::T(Schema::Object(object)) => object,
            _ => panic!("not an object schema"),
        }
    }

    /// `full` (every member set) writes exactly the members the schema of `T` describes, in
    /// its order, and `least` (every optional member unset) writes non-null exactly those it
    /// requires.
    fn follows<T: PartialSchema + Serialize>(full: &T, least: &T) {
        let schema = object_of::<T>();
        let written = |value: &T, keep: fn(&Value) -> bool| -> Vec<String> {
            match serde_json::to_value(value).expect("serializes") {
                Value::Object(members) => members
                    .into_iter()
                    .filter(|(_, v)| keep(v))
                    .map(|(k, _)| k)
                    .collect(),
                other => panic!("not an object: {other}"),
            }
        };
        let described: Vec<String> = schema.properties.keys().cloned().collect();
        assert_eq!(written(full, |_| true), described);
        assert_eq!(written(least, |v| !v.is_null()), schema.required);
    }

    /// Every value the schema of `T` lists reads as a `T` and writes back the same.
    fn lists_only_known<T: PartialSchema + Serialize + DeserializeOwned>() {
        let values = object_of::<T>().enum_values.expect("an enum");
        assert!(!values.is_empty());
        for value in values {
            let read: T = serde_json::from_value(value.clone()).expect("the engine reads it");
            assert_eq!(serde_json::to_value(read).expect("serializes"), value);
        }
    }

    fn error() -> ErrorInfo {
        ErrorInfo {
            message: "m".into(),
            code: "c".into(),
            step: "s".into(),
            details: Some(json!({})),
            foreach_index: Some(0),
            iteration: Some(1),
        }
    }

    fn tripwire() -> TripwireInfo {
        TripwireInfo {
            reason: "r".into(),
            retry: false,
            metadata: json!({}),
            processor_id: Some("p".into()),
        }
    }

    fn item(full: bool) -> ItemRecord {
        ItemRecord {
            index: 0,
            status: StepStatus::Success,
            input: Arc::new(json!(1)),
            output: full.then(|| Arc::new(json!(2))),
            error: full.then(error),
            attempts: 1,
        }
    }

    #[test]
    fn every_schema_describes_exactly_the_members_its_type_writes() {
        let least_error = ErrorInfo {
            details: None,
            foreach_index: None,
            iteration: None,
            ..error()
        };
        follows(&error(), &least_error);
        let least_tripwire = TripwireInfo {
            processor_id: None,
            ..tripwire()
        };
        follows(&tripwire(), &least_tripwire);
        follows(&item(true), &item(false));
        let mut full = StepRecord::new(StepStatus::Success);
        full.input = Some(Arc::new(json!(1)));
        full.output = Some(Arc::new(json!(2)));
        full.error = Some(error());
        full.tripwire = Some(tripwire());
        full.attempts = Some(1);
        full.bail = Some(true);
        full.suspend_payload = Some(json!({}));
        full.labels = Some(vec!["l".into()]);
        full.iteration = Some(1);
        full.items = Some(vec![item(true)]);
        full.started_at = Some("t".into());
        full.suspended_at = Some("t".into());
        full.resumed_at = Some("t".into());
        full.resume_data = Some(json!({}));
        full.ended_at = Some("t".into());
        follows(&full, &StepRecord::new(StepStatus::Success));
        let from = RestartedFrom {
            run_id: "r".into(),
            path: "p".into(),
        };
        follows(&from, &from);
        let suspended = |foreach_index| SuspendedEntry {
            path: "p".into(),
            labels: Vec::new(),
            payload: json!({}),
            foreach_index,
        };
        follows(&suspended(Some(0)), &suspended(None));
    }

    #[test]
    fn every_status_and_event_kind_a_schema_lists_is_one_the_engine_reads() {
        lists_only_known::<RunStatus>();
        lists_only_known::<StepStatus>();
        lists_only_known::<EventKind>();
    }
}
