//! The store URL of the PostgreSQL backend: what libpq accepts, plus weft's own parameters.
//!
//! Both libpq forms are read: `postgres://user:password@host:port/db?param=value` (the host may
//! be a Unix-socket directory given as `?host=/run/postgresql`) and `host=/run/postgresql
//! user=weft dbname=weft`. weft takes out its own parameters before handing the rest to the
//! client: `schema` (the PostgreSQL schema that holds weft's tables, `weft` when not given; made
//! on first use) and `lease_ms` (how long a process that stops answering keeps its runs, 10000
//! when not given).

use std::time::Duration;

use super::super::StoreError;

/// What weft reads from a store URL.
#[derive(Debug, Clone)]
pub(super) struct PgUrl {
    /// The URL without weft's parameters, for the client.
    pub client: String,
    /// The schema that holds weft's tables.
    pub schema: String,
    /// How long a process's claim on its runs lasts without a heartbeat.
    pub lease: Duration,
}

/// The default schema.
const SCHEMA: &str = "weft";
/// The default lease.
const LEASE_MS: u64 = 10_000;

/// Whether `url` names a PostgreSQL store, in either of libpq's forms.
pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://")
        || url.starts_with("postgresql://")
        || url
            .split_whitespace()
            .any(|kv| kv.starts_with("host=") || kv.starts_with("dbname="))
}

impl PgUrl {
    /// Reads `url`, refusing a bad weft parameter with what to write instead.
    pub(super) fn parse(url: &str) -> Result<PgUrl, StoreError> {
        let mut schema = None;
        let mut lease = None;
        let mut take = |key: &str, value: &str| -> Result<bool, StoreError> {
            match key {
                "schema" => schema = Some(value.to_owned()),
                "lease_ms" => {
                    let ms: u64 = value.parse().ok().filter(|ms| *ms >= 100).ok_or_else(|| {
                        StoreError::Backend(format!(
                            "store URL: lease_ms={value} is not a number of milliseconds of at \
                             least 100; write e.g. lease_ms=10000"
                        ))
                    })?;
                    lease = Some(Duration::from_millis(ms));
                }
                _ => return Ok(false),
            }
            Ok(true)
        };
        let client = if url.contains("://") {
            let (base, query) = url.split_once('?').unwrap_or((url, ""));
            let mut kept = Vec::new();
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                if !take(k, v)? {
                    kept.push(pair);
                }
            }
            if kept.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{}", kept.join("&"))
            }
        } else {
            let mut kept = Vec::new();
            for pair in url.split_whitespace() {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                if !take(k, v)? {
                    kept.push(pair);
                }
            }
            kept.join(" ")
        };
        let schema = schema.unwrap_or_else(|| SCHEMA.to_owned());
        let valid = schema.len() <= 48
            && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(StoreError::Backend(format!(
                "store URL: schema={schema} is not a schema weft can use; give up to 48 lowercase \
                 letters, digits and underscores, starting with a letter or underscore"
            )));
        }
        Ok(PgUrl {
            client,
            schema,
            lease: lease.unwrap_or(Duration::from_millis(LEASE_MS)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weft_parameters_are_taken_out_of_both_forms() {
        let u = PgUrl::parse("postgres://me@db/weft?schema=w2&sslmode=disable&lease_ms=500")
            .expect("parse");
        assert_eq!(u.client, "postgres://me@db/weft?sslmode=disable");
        assert_eq!(u.schema, "w2");
        assert_eq!(u.lease, Duration::from_millis(500));
        let u = PgUrl::parse("host=/run/postgresql dbname=weft schema=t_1").expect("parse");
        assert_eq!(u.client, "host=/run/postgresql dbname=weft");
        assert_eq!(u.schema, "t_1");
        assert_eq!(u.lease, Duration::from_millis(LEASE_MS));
        let u = PgUrl::parse("postgresql:///weft?host=/tmp").expect("parse");
        assert_eq!(
            (u.client.as_str(), u.schema.as_str()),
            ("postgresql:///weft?host=/tmp", "weft")
        );
    }

    #[test]
    fn a_bad_schema_or_lease_is_refused_with_what_to_write() {
        let e = PgUrl::parse("postgres://h/d?schema=Bad;drop").expect_err("refused");
        assert!(e.to_string().contains("lowercase letters"), "{e}");
        let e = PgUrl::parse("postgres://h/d?lease_ms=5").expect_err("refused");
        assert!(e.to_string().contains("lease_ms=10000"), "{e}");
    }

    #[test]
    fn both_forms_are_recognised_and_a_path_is_not() {
        assert!(is_postgres("postgres://u@h/d"));
        assert!(is_postgres("host=/run/postgresql dbname=weft"));
        assert!(!is_postgres("/var/lib/weft"));
    }
}
