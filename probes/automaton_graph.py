"""The graph half of automaton extraction (probes/automaton.py): a head's cluster transitions as a table,
minimised by Moore partition refinement, and compared with the group's Cayley graph on the actions used."""

from __future__ import annotations

from collections import Counter, defaultdict

from deltalens.interp.capture import Capture
from deltalens.tasks.permutations import VARIABLE_NAMES


def _transitions(cap: Capture, cluster: dict[int, int], sequences: list[list[int]]):
    """(cluster, action) -> majority next cluster, the fraction of transitions that follow it, the actions."""
    perm = cap.labels["perm_id"].numpy()
    observed: defaultdict = defaultdict(Counter)
    for rows in sequences:
        for prev, cur in zip(rows, rows[1:]):
            observed[(cluster[prev], int(perm[cur]))][cluster[cur]] += 1
    table = {key: counts.most_common(1)[0][0] for key, counts in observed.items()}
    total = sum(sum(c.values()) for c in observed.values())
    determinism = sum(c.most_common(1)[0][1] for c in observed.values()) / total
    return table, determinism, sorted({a for _, a in table})


def _closure(vertices: set, actions: list[int], sigma: dict) -> set:
    """The arrangements reachable from `vertices` under the actions used (the Cayley graph's vertices)."""
    vertices, frontier = set(vertices), list(vertices)
    while frontier:
        g = frontier.pop()
        for a in actions:
            h = _apply(g, sigma[a])
            if h not in vertices:
                vertices.add(h)
                frontier.append(h)
    return vertices


def _permutation_of_actions(cap: Capture, sequences: list[list[int]]) -> dict[int, tuple[int, ...]]:
    """action perm id -> sigma with after[i] = before[sigma[i]], read off the true states."""
    states, perm = cap.states.numpy(), cap.labels["perm_id"].numpy()
    sigma: dict[int, tuple[int, ...]] = {}
    for rows in sequences:
        for prev, cur in zip(rows, rows[1:]):
            a = int(perm[cur])
            if a not in sigma:
                before, after = list(states[prev]), list(states[cur])
                sigma[a] = tuple(before.index(x) for x in after)
    return sigma


def statement_of(sigma: tuple[int, ...]) -> str:
    """The REPL statement of an action (after[i] = before[sigma[i]]): "a, b = b, a"; "pass" for the identity."""
    moved = [i for i, j in enumerate(sigma) if i != j]
    if not moved:
        return "pass"
    return f"{', '.join(VARIABLE_NAMES[i] for i in moved)} = {', '.join(VARIABLE_NAMES[sigma[i]] for i in moved)}"


def _apply(state: tuple[int, ...], sigma: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(state[j] for j in sigma)


def _moore(n: int, labels: list, delta: dict[tuple[int, int], int], actions: list[int]) -> list[int]:
    """Partition refinement: state -> block, two states in one block iff same label and same block-successors."""
    block = {lab: i for i, lab in enumerate(dict.fromkeys(labels))}
    part = [block[lab] for lab in labels]
    while True:
        signature = [
            (part[s], tuple(part[delta[(s, a)]] if (s, a) in delta else -1 for a in actions)) for s in range(n)
        ]
        ids = {sig: i for i, sig in enumerate(dict.fromkeys(signature))}
        new = [ids[sig] for sig in signature]
        if len(set(new)) == len(set(part)):
            return new
        part = new


def _isomorphic(n: int, delta: dict[tuple[int, int], int], vertices: set, sigma: dict, actions: list[int]) -> bool:
    """Is there a bijection of the n states onto `vertices` carrying every transition onto a Cayley edge?"""
    if n != len(vertices):
        return False
    for a in actions:  # a complete table, as the Cayley graph has
        if any((s, a) not in delta for s in range(n)):
            return False
    adjacency = defaultdict(list)
    for (s, a), t in delta.items():
        adjacency[s].append((a, t))
        adjacency[t].append((-1 - a, s))  # reverse edges, to reach every state of a component
    unmapped, image = set(range(n)), {}
    used: set = set()
    while unmapped:
        root = min(unmapped)
        for g in sorted(vertices - used):
            trial, ok, stack = {root: g}, True, [root]
            while stack and ok:
                s = stack.pop()
                for a, t in adjacency[s]:
                    if a >= 0:
                        target = _apply(trial[s], sigma[a])
                    else:  # t -a-> s: trial[t] must map onto trial[s] under action a
                        inv = sigma[-1 - a]
                        target = tuple(trial[s][inv.index(i)] for i in range(len(inv)))
                    if t in trial:
                        ok = trial[t] == target
                    elif target in used or target in trial.values():
                        ok = False
                    else:
                        trial[t] = target
                        stack.append(t)
                    if not ok:
                        break
            if ok:
                image.update(trial)
                used |= set(trial.values())
                unmapped -= set(trial)
                break
        else:
            return False
    return len(used) == len(vertices)


def _minimised(k: int, cluster_labels: list, table: dict, actions: list[int]):
    """The k clusters' table Moore-minimised: (cluster -> state, n states, state transitions, state labels)."""
    part = _moore(k, cluster_labels, table, actions)
    n_states = len(set(part))
    delta = {(part[s], a): part[t] for (s, a), t in table.items()}
    labels: list = [()] * n_states
    for c in range(k):
        labels[part[c]] = cluster_labels[c]
    return part, n_states, delta, labels
