//! The graphs of runs loaded from the store, by the sha256 of their definition: every run of
//! one workflow loaded here (a `wait` or `show` after its end, a resume or recovery after a
//! restart) shares one parsed and checked graph, whose schemas compile once, instead of
//! parsing its definition and compiling its schemas again at each load.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::runtime::lock;
use super::{RuntimeError, checked};
use crate::engine::Graph;
use crate::store::Definition;

/// At most [`RuntimeConfig::graph_cache`](super::RuntimeConfig::graph_cache) graphs; when full,
/// one of them makes room for the next.
pub(super) struct Graphs {
    most: usize,
    by_digest: Mutex<HashMap<String, Arc<Graph>>>,
}

impl Graphs {
    /// A cache of at most `most` graphs (none with 0).
    pub(super) fn new(most: usize) -> Self {
        Graphs {
            most,
            by_digest: Mutex::default(),
        }
    }

    /// The graph of run `run`'s stored `definition`, parsed and checked once per definition
    /// (a definition that fails the checks fails them at every load, and is not kept).
    pub(super) fn of(&self, run: &str, definition: Vec<u8>) -> Result<Arc<Graph>, RuntimeError> {
        let definition = Definition::new(definition);
        if let Some(graph) = lock(&self.by_digest).get(definition.digest()) {
            return Ok(graph.clone());
        }
        let graph = Arc::new(checked::graph(run, definition.bytes())?);
        if self.most > 0 {
            let mut by_digest = lock(&self.by_digest);
            if by_digest.len() >= self.most
                && let Some(other) = by_digest.keys().next().cloned()
            {
                by_digest.remove(&other);
            }
            by_digest.insert(definition.digest().to_owned(), graph.clone());
        }
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(id: &str) -> Vec<u8> {
        use crate::engine::sim::{file, graph, step};
        let graph = graph(file(id, vec![step("only")]));
        serde_json::to_vec(&graph).expect("a graph serializes")
    }

    #[test]
    fn one_definition_is_parsed_once_and_the_cache_stays_bounded() {
        let graphs = Graphs::new(2);
        let a = graphs.of("r1", definition("a")).expect("a");
        let again = graphs.of("r2", definition("a")).expect("a again");
        assert!(Arc::ptr_eq(&a, &again), "the second load shares the graph");
        for id in ["b", "c", "d"] {
            graphs.of("r3", definition(id)).expect("loads");
        }
        assert_eq!(lock(&graphs.by_digest).len(), 2);
        let off = Graphs::new(0);
        let x = off.of("r1", definition("a")).expect("a");
        let y = off.of("r1", definition("a")).expect("a");
        assert!(!Arc::ptr_eq(&x, &y), "a cache of 0 keeps nothing");
        assert!(lock(&off.by_digest).is_empty());
    }

    #[test]
    fn a_definition_that_fails_its_checks_fails_every_time_and_is_not_kept() {
        let graphs = Graphs::new(4);
        for _ in 0..2 {
            let err = graphs.of("r1", b"{not json".to_vec()).expect_err("refused");
            assert!(err.to_string().contains("r1"), "{err}");
        }
        assert!(lock(&graphs.by_digest).is_empty());
    }
}
