//! Rule-level dependency cycles: DependencyRules form a directed graph over
//! resource types (edge dependent → dependency). A rule whose edge lies on a
//! cycle is reported with the cycle, named the same way on every rule in it.

use std::{
    borrow::Borrow,
    collections::{BTreeMap, BTreeSet, VecDeque},
};

use holdfast_shared::api::{DependencyRule, GroupResource};

/// One DependencyRule reduced to its edges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleEdges {
    /// Name of the rule (unique among the rules given).
    pub rule: String,
    /// The dependent type (holds the references).
    pub dependent: GroupResource,
    /// The dependency types (protected).
    pub dependencies: Vec<GroupResource>,
}

impl RuleEdges {
    /// The edges of `dr`, named `name` (the caller may qualify it, e.g. by workspace).
    pub fn of(name: impl Into<String>, dr: &DependencyRule) -> Self {
        let mut dependencies: Vec<GroupResource> = Vec::new();
        for d in &dr.spec.dependencies {
            let gr = GroupResource::new(&d.group, &d.resource);
            if !dependencies.contains(&gr) {
                dependencies.push(gr);
            }
        }
        Self {
            rule: name.into(),
            dependent: GroupResource::new(&dr.spec.dependent.group, &dr.spec.dependent.resource),
            dependencies,
        }
    }
}

/// A cycle a rule takes part in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// The types along the cycle, starting and ending with the same type
    /// (rotated to start at the smallest type, so every rule names it the same).
    pub types: Vec<GroupResource>,
    /// The rules whose edges make up the cycle, sorted.
    pub rules: Vec<String>,
}

impl Cycle {
    /// Human-readable: `a → b → a (DependencyRules r1, r2)`.
    pub fn message(&self) -> String {
        let path = self
            .types
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" → ");
        let noun = if self.rules.len() == 1 {
            "DependencyRule"
        } else {
            "DependencyRules"
        };
        format!(
            "dependency cycle {path} (formed by {noun} {}): objects on it can never be deleted normally; remove one of the rules or use the skip-protection annotation",
            self.rules.join(", ")
        )
    }
}

/// For every rule on a cycle, the (first, canonical) cycle it is on.
pub fn find_cycles<R: Borrow<RuleEdges>>(rules: &[R]) -> BTreeMap<String, Cycle> {
    if acyclic(rules) {
        // The common case, checked in linear time with hashed types.
        return BTreeMap::new();
    }
    // Adjacency: type -> [(next type, rule)], deterministic order.
    let mut adj: BTreeMap<&GroupResource, BTreeSet<(&GroupResource, &str)>> = BTreeMap::new();
    for r in rules.iter().map(Borrow::borrow) {
        for d in &r.dependencies {
            adj.entry(&r.dependent)
                .or_default()
                .insert((d, r.rule.as_str()));
        }
    }
    // Only edges inside one strongly connected component lie on a cycle: search
    // just those (keeps 10,000 acyclic rules linear).
    let scc = components(&adj);
    let mut out = BTreeMap::new();
    for r in rules.iter().map(Borrow::borrow) {
        for d in &r.dependencies {
            let same = r.dependent == *d
                || (scc.contains_key(&r.dependent) && scc.get(&r.dependent) == scc.get(d));
            if !same {
                continue;
            }
            if let Some(cycle) = cycle_through(&adj, &r.dependent, d, &r.rule) {
                out.insert(r.rule.clone(), cycle);
                break;
            }
        }
    }
    out
}

/// Whether the types and edges of `rules` form no cycle (self-edges included):
/// Kahn's topological sort over hashed type ids removes every type.
fn acyclic<R: Borrow<RuleEdges>>(rules: &[R]) -> bool {
    // foldhash: 20,000 types are hashed on every pass of 10,000 rules.
    let mut ids: foldhash::HashMap<&GroupResource, usize> = foldhash::HashMap::default();
    let mut id_of = |gr| {
        let next = ids.len();
        *ids.entry(gr).or_insert(next)
    };
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for r in rules.iter().map(Borrow::borrow) {
        let from = id_of(&r.dependent);
        for d in &r.dependencies {
            edges.push((from, id_of(d)));
        }
    }
    let n = ids.len();
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(from, to) in &edges {
        out[from].push(to);
        indegree[to] += 1;
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut removed = 0;
    while let Some(i) = ready.pop() {
        removed += 1;
        for &to in &out[i] {
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.push(to);
            }
        }
    }
    removed == n
}

/// The types and edges of a set of rules, kept across passes so that adding or
/// removing one rule's edges costs that rule's edges, not the set's: while the
/// graph is acyclic, an edge `u → v` added closes a cycle exactly when `v`
/// already reaches `u` (a search from `v` only), and removing edges never makes
/// one. [`find_cycles`] names the cycles once one exists.
#[derive(Debug, Default)]
pub struct EdgeGraph {
    /// type → next type → how many edges (of how many rules) join them.
    next: foldhash::HashMap<GroupResource, foldhash::HashMap<GroupResource, usize>>,
}

impl EdgeGraph {
    /// The graph of `rules`.
    pub fn of<R: Borrow<RuleEdges>>(rules: &[R]) -> Self {
        let mut g = Self::default();
        for r in rules {
            g.insert_edges(r.borrow());
        }
        g
    }

    /// Adds the edges of `r`; returns whether one of them closes a cycle (one
    /// from a type to itself included), judged on the graph before each edge.
    pub fn add(&mut self, r: &RuleEdges) -> bool {
        let mut closes = false;
        for d in &r.dependencies {
            closes |= *d == r.dependent || self.reaches(d, &r.dependent);
            self.insert_edge(&r.dependent, d);
        }
        closes
    }

    /// Removes the edges of `r` (added before).
    pub fn remove(&mut self, r: &RuleEdges) {
        for d in &r.dependencies {
            let Some(next) = self.next.get_mut(&r.dependent) else {
                continue;
            };
            if let Some(n) = next.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    next.remove(d);
                }
            }
            if next.is_empty() {
                self.next.remove(&r.dependent);
            }
        }
    }

    fn insert_edges(&mut self, r: &RuleEdges) {
        for d in &r.dependencies {
            self.insert_edge(&r.dependent, d);
        }
    }

    fn insert_edge(&mut self, from: &GroupResource, to: &GroupResource) {
        *self
            .next
            .entry(from.clone())
            .or_default()
            .entry(to.clone())
            .or_default() += 1;
    }

    /// Whether a path leads from `from` to `to` (depth first, each type once).
    fn reaches(&self, from: &GroupResource, to: &GroupResource) -> bool {
        let mut seen: foldhash::HashSet<&GroupResource> = foldhash::HashSet::default();
        let mut stack = vec![from];
        while let Some(t) = stack.pop() {
            if t == to {
                return true;
            }
            if !seen.insert(t) {
                continue;
            }
            stack.extend(self.next.get(t).into_iter().flat_map(|n| n.keys()));
        }
        false
    }
}

/// Strongly connected component ids (Kosaraju, iterative).
fn components<'a>(
    adj: &BTreeMap<&'a GroupResource, BTreeSet<(&'a GroupResource, &'a str)>>,
) -> BTreeMap<&'a GroupResource, usize> {
    let mut nodes: BTreeSet<&GroupResource> = BTreeSet::new();
    let mut rev: BTreeMap<&GroupResource, Vec<&GroupResource>> = BTreeMap::new();
    for (from, tos) in adj {
        nodes.insert(from);
        for (to, _) in tos {
            nodes.insert(to);
            rev.entry(to).or_default().push(from);
        }
    }
    // First pass: finish order.
    let mut visited: BTreeSet<&GroupResource> = BTreeSet::new();
    let mut order: Vec<&GroupResource> = Vec::with_capacity(nodes.len());
    for &start in &nodes {
        if !visited.insert(start) {
            continue;
        }
        let mut stack: Vec<(&GroupResource, Vec<&GroupResource>)> = vec![(
            start,
            adj.get(start)
                .into_iter()
                .flatten()
                .map(|(t, _)| *t)
                .collect(),
        )];
        while let Some((node, next)) = stack.last_mut() {
            match next.pop() {
                Some(n) => {
                    if visited.insert(n) {
                        let succ = adj.get(n).into_iter().flatten().map(|(t, _)| *t).collect();
                        stack.push((n, succ));
                    }
                }
                None => {
                    order.push(node);
                    stack.pop();
                }
            }
        }
    }
    // Second pass on the reversed graph, in reverse finish order.
    let mut comp: BTreeMap<&GroupResource, usize> = BTreeMap::new();
    let mut id = 0;
    for &start in order.iter().rev() {
        if comp.contains_key(start) {
            continue;
        }
        let mut stack = vec![start];
        comp.insert(start, id);
        while let Some(n) = stack.pop() {
            for &p in rev.get(n).into_iter().flatten() {
                if !comp.contains_key(p) {
                    comp.insert(p, id);
                    stack.push(p);
                }
            }
        }
        id += 1;
    }
    comp
}

/// The shortest cycle using edge `from → to` (of `rule`), if `to` reaches `from`.
fn cycle_through(
    adj: &BTreeMap<&GroupResource, BTreeSet<(&GroupResource, &str)>>,
    from: &GroupResource,
    to: &GroupResource,
    rule: &str,
) -> Option<Cycle> {
    // BFS from `to` back to `from`, remembering how each type was reached.
    let mut parent: BTreeMap<&GroupResource, (&GroupResource, &str)> = BTreeMap::new();
    let mut seen: BTreeSet<&GroupResource> = BTreeSet::new();
    let mut queue = VecDeque::new();
    seen.insert(to);
    queue.push_back(to);
    let mut found = from == to;
    while !found {
        let Some(cur) = queue.pop_front() else { break };
        for (next, via) in adj.get(cur).into_iter().flatten() {
            if seen.insert(next) {
                parent.insert(next, (cur, via));
                if *next == from {
                    found = true;
                    break;
                }
                queue.push_back(next);
            }
        }
    }
    if !found {
        return None;
    }
    // Walk back from `from` to `to`.
    let mut path = vec![from.clone()];
    let mut rules: BTreeSet<String> = [rule.to_string()].into();
    let mut cur = from;
    while cur != to {
        let (prev, via) = parent.get(cur)?;
        rules.insert((*via).to_string());
        path.push((*prev).clone());
        cur = prev;
    }
    // `path` is from ← ... ← to, i.e. reversed; the cycle is from → to → ... → from.
    // Reversed it is to → ... → from; prefixed with `from` it is the whole cycle.
    path.reverse();
    let mut types: Vec<GroupResource> = Vec::with_capacity(path.len() + 1);
    types.push(from.clone());
    types.extend(path);
    // Rotate so the cycle starts at its smallest type.
    let ring: Vec<GroupResource> = types[..types.len() - 1].to_vec();
    let start = ring
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.cmp(b.1))
        .map_or(0, |(i, _)| i);
    let mut rotated: Vec<GroupResource> = ring[start..]
        .iter()
        .chain(&ring[..start])
        .cloned()
        .collect();
    if let Some(first) = rotated.first().cloned() {
        rotated.push(first);
    }
    Some(Cycle {
        types: rotated,
        rules: rules.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gr(s: &str) -> GroupResource {
        let (r, g) = s.split_once('.').unwrap_or((s, ""));
        GroupResource::new(g, r)
    }

    fn rule(name: &str, dependent: &str, deps: &[&str]) -> RuleEdges {
        RuleEdges {
            rule: name.into(),
            dependent: gr(dependent),
            dependencies: deps.iter().map(|d| gr(d)).collect(),
        }
    }

    #[test]
    fn the_acyclic_check_sees_every_kind_of_cycle() {
        // A self-edge, a two-type cycle, a cycle behind an acyclic part.
        for rules in [
            vec![rule("s", "s.x", &["s.x"])],
            vec![rule("a", "a.x", &["b.x"]), rule("b", "b.x", &["a.x"])],
            vec![
                rule("in", "in.x", &["a.x"]),
                rule("a", "a.x", &["b.x"]),
                rule("b", "b.x", &["c.x"]),
                rule("c", "c.x", &["a.x", "out.x"]),
            ],
        ] {
            assert!(!acyclic(&rules), "{rules:?}");
            let names: Vec<String> = find_cycles(&rules).into_keys().collect();
            let expected: Vec<String> = rules
                .iter()
                .map(|r| r.rule.clone())
                .filter(|n| n != "in")
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            assert_eq!(names, expected);
        }
    }

    #[test]
    fn two_rule_cycle_is_named_identically_on_both() {
        let rules = vec![
            rule(
                "vm-deps",
                "virtualmachines.compute.test.io",
                &["vpcs.network.test.io"],
            ),
            rule(
                "vpc-deps",
                "vpcs.network.test.io",
                &["virtualmachines.compute.test.io"],
            ),
            rule("db-deps", "databases.db.io", &["vpcs.network.test.io"]),
        ];
        let cycles = find_cycles(&rules);
        assert_eq!(cycles.len(), 2, "{cycles:?}");
        let a = &cycles["vm-deps"];
        let b = &cycles["vpc-deps"];
        assert_eq!(a, b);
        assert_eq!(a.rules, vec!["vm-deps".to_string(), "vpc-deps".to_string()]);
        assert_eq!(
            a.types,
            vec![
                gr("virtualmachines.compute.test.io"),
                gr("vpcs.network.test.io"),
                gr("virtualmachines.compute.test.io")
            ]
        );
        let msg = a.message();
        assert!(
            msg.starts_with("dependency cycle virtualmachines.compute.test.io → vpcs.network.test.io → virtualmachines.compute.test.io (formed by DependencyRules vm-deps, vpc-deps)"),
            "{msg}"
        );
        assert!(!cycles.contains_key("db-deps"));
    }

    #[test]
    fn self_loop_and_long_cycle() {
        let rules = vec![rule("self", "a.x", &["a.x"])];
        let cycles = find_cycles(&rules);
        assert_eq!(cycles["self"].types, vec![gr("a.x"), gr("a.x")]);
        let rules = vec![
            rule("r1", "c.x", &["a.x"]),
            rule("r2", "a.x", &["b.x"]),
            rule("r3", "b.x", &["c.x", "d.x"]),
        ];
        let cycles = find_cycles(&rules);
        assert_eq!(cycles.len(), 3);
        assert_eq!(
            cycles["r2"].types,
            vec![gr("a.x"), gr("b.x"), gr("c.x"), gr("a.x")]
        );
        assert_eq!(cycles["r1"], cycles["r3"]);
    }

    #[test]
    fn ten_thousand_acyclic_rules_are_fast() {
        let rules: Vec<RuleEdges> = (0..10_000)
            .map(|i| {
                rule(
                    &format!("r{i}"),
                    &format!("t{i}.x"),
                    &[&format!("t{}.x", i + 1)],
                )
            })
            .collect();
        let start = std::time::Instant::now();
        assert!(find_cycles(&rules).is_empty());
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        // Closing a (shorter) chain makes one cycle through every rule on it.
        let mut rules: Vec<RuleEdges> = rules[..200].to_vec();
        rules.push(rule("close", "t200.x", &["t0.x"]));
        let cycles = find_cycles(&rules);
        assert_eq!(cycles.len(), 201);
        assert_eq!(cycles["r0"].types.len(), 202);
    }

    #[test]
    fn acyclic_graph_has_no_cycles() {
        let rules = vec![
            rule("r1", "a.x", &["b.x", "c.x"]),
            rule("r2", "b.x", &["c.x"]),
            rule("r3", "d.x", &["a.x"]),
        ];
        assert!(acyclic(&rules));
        assert!(find_cycles(&rules).is_empty());
    }

    /// Edges added and removed one rule at a time: the graph says a cycle closed
    /// exactly when the rules it holds have one (checked against [`find_cycles`]
    /// after every step of a pseudo-random sequence).
    #[test]
    fn the_edge_graph_follows_find_cycles() {
        let gr = |i: u64| GroupResource::new("g", format!("t{i}"));
        let mut next = crate::test_sequence(0x9e37_79b9_7f4a_7c15);
        let mut rules: Vec<RuleEdges> = Vec::new();
        let mut graph = EdgeGraph::default();
        let mut acyclic_now = true;
        for step in 0..2_000 {
            if rules.len() > 6 || (!rules.is_empty() && next(3) == 0) {
                let r = rules.swap_remove(next(rules.len() as u64) as usize);
                graph.remove(&r);
                // Removing edges cannot close a cycle; whether it opened the one
                // there was is for find_cycles to say.
                if !acyclic_now {
                    acyclic_now = find_cycles(&rules).is_empty();
                }
            } else {
                let r = RuleEdges {
                    rule: format!("r{step}"),
                    dependent: gr(next(12)),
                    dependencies: (0..1 + next(2)).map(|_| gr(next(12))).collect(),
                };
                let closes = graph.add(&r);
                rules.push(r);
                if acyclic_now {
                    acyclic_now = !closes;
                } else {
                    acyclic_now = find_cycles(&rules).is_empty();
                }
            }
            assert_eq!(acyclic_now, find_cycles(&rules).is_empty(), "step {step}");
            let rebuilt = EdgeGraph::of(&rules);
            assert_eq!(rebuilt.next, graph.next, "step {step}");
        }
    }
}
