"""A seeded generator of realistic Julia modules: the source text the benchmark prompts are made of.

A module is a fixed head and tail around an endless, ordered stream of parts (the main struct, its
constructors, methods dispatching on it, a collection type, then functions with loops and string
interpolation, each with a docstring). Taking the first k parts gives a module of any size; each
part brings its own lines for the `@testset` block at the end of the module, so the tests only call code
that is there. The same seed always gives the same text.
"""

import itertools
import random
from dataclasses import dataclass, field

TYPE_NAMES = [
    "Particle", "Sensor", "Invoice", "Vertex", "Reactor", "Satellite", "Parcel", "Station",
    "Turbine", "Sample", "Account", "Vessel", "Battery", "Glacier", "Beacon", "Harvest",
    "Locomotive", "Reservoir", "Telescope", "Warehouse",
]
COLLECTION_NAMES = ["Registry", "Catalog", "Fleet", "Inventory", "Ledger", "Archive", "Network"]
NUMERIC_FIELDS = [
    "mass", "speed", "energy", "weight", "charge", "price", "volume", "score", "radius", "load",
    "rate", "capacity", "altitude", "balance", "temperature", "pressure", "depth", "voltage",
]
STRING_FIELDS = ["name", "label", "owner", "region", "code"]
ADJECTIVES = ["tracked", "measured", "scheduled", "simulated", "archived", "monitored", "priced"]
FILLER_WORDS = (
    "the values are kept in plain vectors so that loops stay simple and allocation free while "
    "callers may sort filter or group them without copying every field twice before a report is "
    "written the thresholds below were chosen by hand and should be revisited once real data "
    "arrives from the next batch of measurements which are expected later this season"
).split()


@dataclass
class Part:
    code: str
    tests: list = field(default_factory=list)


@dataclass
class JuliaModule:
    """A module as head + parts + tail; `source(k)` renders it with the first k parts."""

    name: str
    type_name: str
    head: str
    tail: str
    seed: int
    _parts: list = field(default_factory=list)
    _stream: object = None

    def parts(self, k):
        while len(self._parts) < k:
            self._parts.append(next(self._stream))
        return self._parts[:k]

    def source(self, k, filler=""):
        parts = self.parts(k)
        body = "".join(p.code + "\n" for p in parts)
        tests = [t for p in parts for t in p.tests]
        if tests:
            lines = "".join(f"    {t}\n" for t in tests)
            body += f"using Test\n\n@testset \"{self.name}\" begin\n{lines}end\n\n"
        return self.head + body + filler + self.tail


def generate_module(seed=0):
    """The seeded Julia module; `.type_name` is the type used throughout (the one the edit renames)."""
    rng = random.Random(seed)
    type_name, *others = rng.sample(TYPE_NAMES, 3)
    collection = rng.choice(COLLECTION_NAMES)
    numeric = rng.sample(NUMERIC_FIELDS, 4)
    text_field = rng.choice(STRING_FIELDS)
    adjective = rng.choice(ADJECTIVES)
    name = f"{type_name}{rng.choice(['s', 'Tools', 'Models', 'Core'])}"
    head = (
        f'"""\n    {name}\n\nTypes and functions for {adjective} `{type_name}` records, '
        f"kept in a `{collection}`.\n\"\"\"\nmodule {name}\n\n"
        f"export {type_name}, {collection}\n\n"
    )
    tail = f"end # module {name}\n"
    module = JuliaModule(name=name, type_name=type_name, head=head, tail=tail, seed=seed)
    module._stream = _parts(rng, type_name, collection, numeric, text_field, adjective)
    return module


def _parts(rng, T, C, numeric, s, adjective):
    lower = T.lower()
    f0, f1, f2, f3 = numeric
    yield Part(
        f'"""\n    {T}\n\nOne {adjective} {lower}.\n\n# Fields\n- `id::Int`: position in its `{C}`.\n'
        f"- `{s}::String`: shown in reports.\n- `{f0}::Float64`, `{f1}::Float64`, `{f2}::Float64`, "
        f"`{f3}::Float64`: measured values.\n- `tags::Vector{{String}}`: free labels.\n- `active::Bool`: "
        f'counted by the summaries.\n"""\nmutable struct {T}\n    id::Int\n    {s}::String\n'
        f"    {f0}::Float64\n    {f1}::Float64\n    {f2}::Float64\n    {f3}::Float64\n"
        f"    tags::Vector{{String}}\n"
        f"    active::Bool\nend\n"
    )
    yield Part(
        f'"""\n    {T}({s}; {f0}=1.0, {f1}=0.0, {f2}=0.0)\n\nA new active `{T}` with no tags.\n"""\n'
        f"{T}({s}::AbstractString; {f0}::Real = 1.0, {f1}::Real = 0.0, {f2}::Real = 0.0) =\n"
        f"    {T}(0, String({s}), {f0}, {f1}, {f2}, 0.0, String[], true)\n",
        [f'a = {T}("alpha"; {f0} = 2.0, {f1} = 1.5)', f'b = {T}("beta"; {f0} = 3.0)',
         f"@test a.{f0} == 2.0", "@test a.active"],
    )
    yield Part(
        f"function Base.show(io::IO, x::{T})\n"
        f'    print(io, "{T}(", x.id, ", \\"", x.{s}, "\\", {f0}=", x.{f0}, ")")\nend\n\n'
        f"Base.isless(a::{T}, b::{T}) = isless(a.{f0}, b.{f0})\n",
        ['@test occursin("alpha", sprint(show, a))', "@test a < b"],
    )
    yield Part(
        f'"""\n    {C}\n\nAll `{T}` records of a run, in insertion order; ids are positions.\n"""\n'
        f"struct {C}\n    items::Vector{{{T}}}\nend\n\n{C}() = {C}({T}[])\n\n"
        f"function Base.push!(c::{C}, x::{T})\n    x.id = length(c.items) + 1\n"
        f"    push!(c.items, x)\n    return c\nend\n\n"
        f"Base.length(c::{C}) = length(c.items)\nBase.iterate(c::{C}, i...) = iterate(c.items, i...)\n",
        [f"c = {C}()", "push!(c, a)", "push!(c, b)", "@test length(c) == 2", "@test b.id == 2"],
    )
    templates = [_total, _report, _largest, _scale, _group, _first_above, _describe, _validate,
                 _histogram, _normalize]
    for round_ in itertools.count():
        suffix = "" if round_ == 0 else f"_{round_ + 1}"
        for template in templates:
            f = numeric[(round_ + templates.index(template)) % len(numeric)]
            yield template(rng, T, C, f, s, suffix)


def _total(rng, T, C, f, s, sfx):
    name = f"total_{f}{sfx}"
    return Part(
        f'"""\n    {name}(items) -> Float64\n\nSum of `{f}` over the active `{T}` records.\n"""\n'
        f"function {name}(items::Vector{{{T}}})\n    total = 0.0\n    for x in items\n"
        f"        x.active || continue\n        total += x.{f}\n    end\n    return total\nend\n\n"
        f"{name}(c::{C}) = {name}(c.items)\n",
        [f"@test {name}([a, b]) == a.{f} + b.{f}"],
    )


def _report(rng, T, C, f, s, sfx):
    name = f"report_{f}{sfx}"
    digits = rng.choice([1, 2, 3])
    return Part(
        f'"""\n    {name}(items) -> String\n\nOne line per `{T}`: its {s} and `{f}`.\n"""\n'
        f"function {name}(items::Vector{{{T}}})\n    lines = String[]\n"
        f"    for (i, x) in enumerate(items)\n"
        f'        push!(lines, "$(i). $(x.{s}): {f} = $(round(x.{f}; digits = {digits}))")\n'
        f'    end\n    return join(lines, "\\n")\nend\n',
        [f'@test startswith({name}([a]), "1. alpha")'],
    )


def _largest(rng, T, C, f, s, sfx):
    name = f"largest_{f}{sfx}"
    return Part(
        f'"""\n    {name}(items) -> Union{{{T}, Nothing}}\n\nThe `{T}` with the largest `{f}`, '
        f'or `nothing` when `items` is empty.\n"""\n'
        f"function {name}(items::Vector{{{T}}})\n    best = nothing\n    for x in items\n"
        f"        if best === nothing || x.{f} > best.{f}\n            best = x\n        end\n"
        f"    end\n    return best\nend\n",
        [f"@test {name}({T}[]) === nothing"],
    )


def _scale(rng, T, C, f, s, sfx):
    name = f"scale_{f}{sfx}!"
    return Part(
        f'"""\n    {name}(items, factor)\n\nMultiply `{f}` of every `{T}` by `factor`, in place.\n"""\n'
        f"function {name}(items::Vector{{{T}}}, factor::Real)\n"
        f"    factor > 0 || throw(ArgumentError(\"factor must be positive, got $factor\"))\n"
        f"    for x in items\n        x.{f} *= factor\n    end\n    return items\nend\n",
        [f"@test_throws ArgumentError {name}([a], -1)"],
    )


def _group(rng, T, C, f, s, sfx):
    name = f"count_tags_by_{f}{sfx}"
    limit = rng.choice([0.5, 1.0, 2.5, 10.0])
    return Part(
        f'"""\n    {name}(items) -> Dict{{String, Int}}\n\nHow many `{T}` records with `{f}` above '
        f'{limit} carry each tag.\n"""\n'
        f"function {name}(items::Vector{{{T}}})\n    counts = Dict{{String, Int}}()\n"
        f"    for x in items\n        x.{f} > {limit} || continue\n        for tag in x.tags\n"
        f"            counts[tag] = get(counts, tag, 0) + 1\n        end\n    end\n"
        f"    return counts\nend\n",
        [f"@test isempty({name}([a, b]))"],
    )


def _first_above(rng, T, C, f, s, sfx):
    name = f"first_above_{f}{sfx}"
    return Part(
        f'"""\n    {name}(c, threshold) -> Int\n\nThe id of the first `{T}` in `c` whose `{f}` '
        f'exceeds `threshold`, or 0.\n"""\n'
        f"function {name}(c::{C}, threshold::Real)\n    i = 1\n    while i <= length(c.items)\n"
        f"        c.items[i].{f} > threshold && return c.items[i].id\n        i += 1\n    end\n"
        f"    return 0\nend\n",
        [f"@test {name}(c, Inf) == 0"],
    )


def _describe(rng, T, C, f, s, sfx):
    name = f"describe_{f}{sfx}"
    unit = rng.choice(["units", "kg", "m/s", "J", "%", "items"])
    return Part(
        f'"""\n    {name}(x::{T}) -> String\n\nA sentence about `x` for logs.\n"""\n'
        f"function {name}(x::{T})\n    state = x.active ? \"active\" : \"retired\"\n"
        f"    tags = isempty(x.tags) ? \"no tags\" : join(x.tags, \", \")\n"
        f'    return "{T} #$(x.id) \\"$(x.{s})\\" is $state with {f} $(x.{f}) {unit} ($tags)"\nend\n',
        [f'@test occursin("active", {name}(a))'],
    )


def _validate(rng, T, C, f, s, sfx):
    name = f"check_{f}{sfx}"
    low, high = sorted(rng.sample([0, 1, 5, 10, 100, 1000], 2))
    return Part(
        f'"""\n    {name}(c::{C})\n\nThrow if a `{T}` has `{f}` outside [{low}, {high}]; '
        f'the message names every offender.\n"""\n'
        f"function {name}(c::{C})\n    bad = String[]\n    for x in c\n"
        f"        if !({low} <= x.{f} <= {high})\n"
        f'            push!(bad, "$(x.{s}) (id $(x.id), {f} = $(x.{f}))")\n        end\n    end\n'
        f'    isempty(bad) || error("{f} out of range for: " * join(bad, "; "))\n'
        f"    return nothing\nend\n",
    )


def _histogram(rng, T, C, f, s, sfx):
    name = f"histogram_{f}{sfx}"
    bins = rng.choice([4, 5, 8, 10])
    return Part(
        f'"""\n    {name}(items; bins={bins}) -> Vector{{Int}}\n\nCounts of `{f}` in `bins` equal '
        f'bins between the smallest and largest value.\n"""\n'
        f"function {name}(items::Vector{{{T}}}; bins::Int = {bins})\n"
        f"    counts = zeros(Int, bins)\n    isempty(items) && return counts\n"
        f"    lo, hi = extrema(x.{f} for x in items)\n    width = hi > lo ? (hi - lo) / bins : 1.0\n"
        f"    for x in items\n        k = min(bins, 1 + floor(Int, (x.{f} - lo) / width))\n"
        f"        counts[k] += 1\n    end\n    return counts\nend\n",
        [f"@test sum({name}([a, b])) == 2"],
    )


def _normalize(rng, T, C, f, s, sfx):
    name = f"normalize_{f}{sfx}!"
    return Part(
        f'"""\n    {name}(items)\n\nDivide `{f}` by the largest absolute value so it lies in [-1, 1].\n"""\n'
        f"function {name}(items::Vector{{{T}}})\n    peak = 0.0\n    for x in items\n"
        f"        peak = max(peak, abs(x.{f}))\n    end\n    peak == 0 && return items\n"
        f"    for x in items\n        x.{f} /= peak\n    end\n"
        f'    @debug "normalized {f} of $(length(items)) {T} records by $peak"\n    return items\nend\n',
    )


def filler_comment(seed, min_chars):
    """A comment paragraph of at least `min_chars` characters, for fine-tuning a module's length."""
    rng = random.Random(seed)
    lines, n = ["# Notes on this module."], 0
    while n < min_chars:
        start = rng.randrange(len(FILLER_WORDS))
        words = [FILLER_WORDS[(start + i) % len(FILLER_WORDS)] for i in range(rng.randint(8, 14))]
        lines.append("# " + " ".join(words).capitalize() + ".")
        n = sum(len(line) + 1 for line in lines)
    return "\n".join(lines)
