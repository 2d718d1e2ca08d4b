#!/usr/bin/env python3
"""bench/serve_load.py — an open-loop load on an OpenAI-compatible server through the `openai`
package, the way users meet it (driven by bench/serve_vs_llamacpp.sh; usable alone).

  serve_load.py run --url http://127.0.0.1:8080/v1 --out RUN.json [--engine NAME] [--model-file M]
                    (--rate R --duration S | --burst N --burst-s S) [--seed 1] [--round 1]
                    [--timeout 120] [--max-tokens 64] [--long-frac 0.25] [--long-chars 4800]
  serve_load.py report RUN.json ... [--csv F] [--json F] [--ttft-slo 2] [--itl-slo 0.1]
  serve_load.py texts [--seed 1] [--n 4]      (prints the prompts a run would send)

`run`: arrivals are Poisson at R req/s for S seconds (`--burst N --burst-s S`: N arrivals at
uniformly random times within S seconds), from a generator seeded by (seed, rate or burst), so
every engine gets the same schedule and the same prompts. A quarter of the requests (exactly,
placed at random) ask to summarize a ~1,000-token text built from the paragraph pool below
(paragraphs shuffled, each one's sentences rotated, so no two texts share more than a sentence
or so of prefix); the rest are short chat questions. Every request is a streamed chat completion
(temperature 0, max_tokens 64, stream_options include_usage), sent on time whether or not the
earlier ones have answered (asyncio), with no retries and a per-request time limit. No warm-up
request is sent. Per request it records the send time, the arrival time of every chunk with
content, tokens (usage.completion_tokens, or chunks with content where the server gives no
usage), the finish reason and the outcome:
  ok        the stream ended with a finish_reason;
  refused   an HTTP error status (status, message and Retry-After kept), or an error event in a
            stream answered 200 before any content (status "200+error TYPE": a refusal sent late);
  lost      no answer, connection error, time limit, an error after content, or a stream that
            ended without a finish_reason.
TTFT is the first content chunk's time less the send time; inter-token gaps are the times
between consecutive content chunks of a stream (pooled over the run's ok streams); output
tokens/s is the ok streams' tokens over the time from the first send to the last answer.
Percentiles are nearest-rank.

`report`: markdown tables per engine, model, rate and round; goodput (the highest rate at which,
in every round, TTFT p99 <= --ttft-slo s, inter-token p99 <= --itl-slo s and at least 99% of
the requests were served); burst runs' served / refused / lost. Writes CSV and JSON summaries.
"""
import argparse
import asyncio
import csv
import json
import math
import os
import random
import sys
import time

PARAGRAPHS = [
    "The lighthouse stood on a spit of rock a mile from the harbour. Its keeper climbed the spiral stair "
    "twice each night to trim the wick and wind the clockwork that turned the lens. In winter the spray "
    "froze on the gallery rail and had to be chipped away with a hammer. Ships passing in the dark counted "
    "the flashes to know which light they were seeing. The keeper kept a log of every vessel, every storm "
    "and every barrel of oil that the supply boat brought. When the light was finally automated, the log "
    "books went to a museum in the town.",
    "Bread begins with flour, water, salt and a leavening agent. The baker mixes them and lets the dough "
    "rest so that the flour absorbs the water and gluten starts to form. Kneading stretches the gluten "
    "into long elastic strands that trap the gas made by the yeast. A slow rise in a cool room gives the "
    "loaf more flavour than a fast rise in a warm one. Before baking, the baker slashes the top so the "
    "loaf can expand without tearing at random. Steam in the first minutes of baking keeps the crust soft "
    "long enough for the loaf to reach its full size.",
    "Glaciers form where more snow falls in winter than melts in summer. Year after year the snow is "
    "buried and pressed into dense blue ice. Under its own weight the ice begins to flow downhill, a few "
    "centimetres or a few metres each day. As it moves it plucks rocks from the valley floor and grinds "
    "them against the bedrock. The valleys it leaves behind have a rounded U shape rather than the V "
    "shape cut by rivers. Piles of rubble called moraines mark the places where a glacier once ended.",
    "The first railways carried coal from mines to the nearest river or canal. Horses pulled the wagons "
    "along wooden rails until iron rails and steam engines replaced them. Within a few decades railway "
    "lines connected most large towns, and travel that once took days took hours. Towns began to keep a "
    "single standard time so that timetables would make sense. Railway companies built stations, hotels "
    "and even whole suburbs along their lines. Freight trains carried goods to ports, and fresh food "
    "reached cities from farms far away.",
    "A honeybee colony can hold tens of thousands of workers and a single queen. The workers change jobs "
    "as they age, cleaning cells first, then feeding larvae, building comb and guarding the entrance. "
    "Only the oldest workers fly out to gather nectar and pollen. A forager that finds a good patch of "
    "flowers returns and performs a dance that tells the others its direction and distance. Nectar is "
    "passed from bee to bee and slowly thickened into honey. In cold weather the bees cluster together "
    "and shiver their flight muscles to keep the queen warm.",
    "Before the printing press, books were copied by hand, one page at a time. A scribe might spend "
    "months on a single volume, and errors crept in with every copy. Movable metal type changed this: a "
    "printer could set a page once and print hundreds of identical sheets. Printed books became cheaper, "
    "and more people learned to read. Pamphlets and newspapers spread news and arguments faster than "
    "ever before. Scholars in different cities could now be sure they were reading the same text.",
    "Tides rise and fall because the moon and the sun pull on the oceans. The moon is much closer, so "
    "its pull matters more, even though the sun is far larger. Most coasts see two high tides and two "
    "low tides each day, about fifty minutes later than the day before. When the sun and moon line up, "
    "the tides are stronger and are called spring tides. When they pull at right angles, the weaker "
    "neap tides follow. In narrow bays the water can rise by more than ten metres between low and high tide.",
    "A clock escapement lets the energy of a falling weight or a wound spring out in small, regular "
    "steps. Each swing of the pendulum releases one tooth of the escape wheel. The wheel in turn gives "
    "the pendulum a tiny push to keep it swinging. Without the escapement the weight would simply fall "
    "and the hands would spin. The length of the pendulum sets the rate, so clockmakers adjust it with a "
    "nut beneath the bob. Changes in temperature alter that length, which is why fine clocks used "
    "pendulums made of two metals.",
    "Rivers carry water, but they also carry sand, silt and stones. Where a river runs fast it can move "
    "large boulders along its bed. Where it slows, at a bend or where it meets the sea, it drops its "
    "load. Over centuries the dropped sediment builds deltas that push the coastline outward. Farmers "
    "have long settled on these flat, fertile plains despite the risk of floods. Dams upstream trap "
    "sediment, and some deltas have begun to shrink as a result.",
    "Coffee plants grow best on tropical hillsides with steady rain and no frost. Their fruit, called "
    "cherries, ripens unevenly, so pickers often return to the same bush several times. The seeds inside "
    "are dried, hulled and sorted before they are shipped as green coffee. Roasting turns them brown and "
    "creates hundreds of aromatic compounds. A light roast keeps more of the bean's origin flavour, "
    "while a dark roast tastes more of the roasting itself. Ground coffee loses its aroma within days, "
    "which is why many people grind it just before brewing.",
    "Maps have always been compromises. A round earth cannot be drawn on a flat sheet without stretching "
    "something. Some projections keep the shapes of countries correct but enlarge areas near the poles. "
    "Others keep areas correct but distort shapes. Navigators preferred projections in which a straight "
    "line on the chart was a line of constant compass bearing. Modern digital maps still choose a "
    "projection, even if most users never notice.",
    "Volcanoes form where molten rock reaches the surface. Some, like those in Hawaii, pour out runny "
    "lava that flows for kilometres and builds broad, gentle shields. Others erupt sticky lava full of "
    "gas, which can explode violently and throw ash high into the air. Volcanic ash is made of tiny "
    "sharp fragments of rock and glass, not the soft remains of burning. Soils formed from old ash are "
    "often very fertile. That is one reason people farm the slopes of volcanoes despite the danger.",
    "Libraries once kept their catalogues on cards in long wooden drawers. Each book had a card for its "
    "author, another for its title and more for its subjects. Librarians typed the cards and filed them "
    "by hand, following detailed rules about alphabetical order. Finding a book meant walking from the "
    "drawers to the shelves with a call number written on a slip of paper. Computer catalogues replaced "
    "the cards, and many old cabinets were sold or given away. Some readers still miss discovering "
    "books by flipping past neighbouring cards.",
    "Birds migrate to follow food and to find safe places to raise their young. Some small songbirds fly "
    "thousands of kilometres twice a year. They navigate using the sun, the stars, the earth's magnetic "
    "field and familiar landmarks. Before leaving, many birds eat heavily and nearly double their weight "
    "in fat. Large flocks often travel at night, when the air is calmer and predators are fewer. Bright "
    "city lights can confuse them, so some cities dim their towers during migration seasons.",
    "Wind turbines turn the motion of air into electricity. The blades are shaped like aircraft wings, so "
    "moving air produces lift that turns the rotor. A gearbox or a large direct-drive generator converts "
    "the slow rotation into electric power. Turbines turn to face the wind and adjust the pitch of their "
    "blades to avoid damage in storms. Offshore sites have stronger and steadier winds than most places on "
    "land. Because the wind varies, grids combine turbines with other sources and with storage.",
    "Cheese starts as milk that is soured and curdled. Rennet or acid makes the milk proteins clump into "
    "curds, leaving a watery whey behind. The cheesemaker cuts, stirs and sometimes heats the curds to "
    "drive out more whey. Pressing, salting and shaping follow, and then the cheese is left to age. "
    "During ageing, bacteria and moulds break down proteins and fats into new flavours. A soft cheese "
    "may be ready in weeks, while a hard one can age for years.",
    "The human eye focuses light with two lenses: the curved cornea at the front and the adjustable lens "
    "behind the pupil. Muscles change the shape of the lens to focus on near or distant objects. Light "
    "falls on the retina, where rods detect dim light and cones detect colour. Signals from these cells "
    "travel along the optic nerve to the brain. The brain fills in the blind spot where the nerve leaves "
    "the eye, so we rarely notice it. With age the lens stiffens, which is why many people need reading "
    "glasses later in life.",
    "Canals were dug to carry heavy goods where roads were poor and rivers did not go. A single horse "
    "could pull a barge carrying many tons, far more than it could pull in a cart. Locks let boats climb "
    "and descend hills by filling and emptying chambers of water. Engineers built aqueducts to carry "
    "canals over valleys and tunnels to take them through ridges. When railways arrived, many canals "
    "lost their trade and fell into disrepair. Today volunteers have restored many of them for leisure boating.",
    "Salt has been valued for thousands of years because it preserves food. Before refrigeration, fish "
    "and meat were packed in salt or soaked in brine to keep them through the winter. Salt was gathered "
    "by evaporating sea water in shallow pans or mined from deposits left by ancient seas. Roads were "
    "built to carry it, and taxes on it funded governments. Some workers were even paid partly in salt. "
    "Today most salt is used not in kitchens but to make chemicals and to clear icy roads.",
    "Telescopes gather more light than the eye can, revealing faint and distant objects. Early telescopes "
    "used lenses, but large lenses sag under their own weight and split colours. Mirrors solved both "
    "problems, and the largest telescopes today use mirrors many metres across. Some are built from many "
    "hexagonal segments that act together as one surface. Telescopes in space avoid the blurring caused "
    "by the atmosphere. Others observe radio waves or infrared light that our eyes cannot see.",
    "A forest changes after a fire in a predictable order. Grasses and small flowering plants arrive "
    "first, taking advantage of the sunlight and the ash-rich soil. Shrubs and fast-growing trees follow "
    "within a few years. Over decades, slower trees that tolerate shade grow up beneath them. Some pines "
    "even need fire, since their cones open only after being heated. Ecologists call this sequence "
    "succession, and it can take centuries to run its course.",
    "Paper is made from fibres pulled apart and then matted together again. Early paper used rags of "
    "linen and cotton, beaten to a pulp in water. A papermaker dipped a screen into the vat, lifted out "
    "a thin layer of fibres and shook it to even the sheet. The wet sheets were pressed between felts "
    "and hung to dry. Wood pulp later replaced rags and made paper cheap enough for daily newspapers. "
    "Paper made from wood pulp, however, tends to yellow and become brittle over the years.",
    "Weather forecasts start with measurements of temperature, pressure, humidity and wind from all over "
    "the world. Balloons, satellites, ships and ground stations all contribute. Computers divide the "
    "atmosphere into a grid and calculate how each cell will change over the next few minutes. Repeating "
    "the calculation many times produces a forecast days ahead. Because small errors grow, forecasters "
    "run the model many times with slightly different starting values. The spread of those runs shows "
    "how confident the forecast can be.",
    "Stone bridges rely on arches, which turn the weight above them into sideways pressure. Each "
    "wedge-shaped stone presses against its neighbours, and the whole arch stands without mortar once "
    "it is complete. While it is being built, a wooden frame called centring holds the stones in place. "
    "The ends of the arch must be anchored firmly, because they push outward on the banks. Some Roman "
    "arch bridges still carry traffic after nearly two thousand years. Their builders had no "
    "calculations, only experience and careful rules of proportion.",
    "Orchestras tune to a single note played by the oboe before a concert. The oboe's clear, steady tone "
    "is easy for the other players to hear. String players adjust the pegs and fine tuners of their "
    "instruments until they match. Wind players move joints and slides to lengthen or shorten their "
    "instruments slightly. As the hall warms up during a concert, the pitch of some instruments drifts. "
    "Players keep listening and adjusting throughout the performance.",
    "Cotton grows in bolls that burst open to reveal soft white fibres around the seeds. Separating the "
    "fibres from the seeds was slow work until machines called gins did it quickly. The cleaned fibre is "
    "combed so that the strands lie parallel, then twisted into yarn. Spinning machines powered by water "
    "and later by steam made yarn in huge quantities. Looms wove the yarn into cloth, and factories grew "
    "around them. The cotton trade shaped economies and lives on several continents.",
]

QUESTIONS = [
    "What is the capital of France?",
    "Give me three tips for sleeping better.",
    "Why is the sky blue?",
    "How many legs does a spider have?",
    "Write a haiku about autumn leaves.",
    "What is the difference between weather and climate?",
    "Suggest a name for a small grey kitten.",
    "How do I boil an egg?",
    "What does a compiler do?",
    "Explain photosynthesis in one sentence.",
    "What are the primary colours?",
    "Translate 'good morning' into Spanish.",
    "Name three planets in our solar system.",
    "What is 17 times 23?",
    "Why do cats purr?",
    "Give me a quick idea for a vegetarian dinner.",
    "What is a prime number?",
    "How far away is the moon?",
    "What is the tallest mountain in the world?",
    "Tell me a short joke about computers.",
    "What causes rainbows?",
    "How do I say thank you in Japanese?",
    "What is the boiling point of water at sea level?",
    "List three uses for baking soda.",
    "Who wrote Romeo and Juliet?",
    "What is an adjective?",
    "How often should I water a cactus?",
    "What is the largest ocean on Earth?",
    "Give me a word that rhymes with orange, if there is one.",
    "What does HTTP stand for?",
    "Why do leaves change colour in the fall?",
    "Recommend a good habit for a productive morning.",
    "What is the speed of light?",
    "How many continents are there?",
    "What is a haiku?",
    "Describe the taste of a lemon.",
    "How do airplanes stay in the air?",
    "What is the square root of 144?",
    "Give me a fun fact about octopuses.",
    "What should I pack for a day hike?",
]


def long_text(rng, chars):
    """paragraphs of the pool in a random order, each with its sentences rotated, until `chars`"""
    order = list(range(len(PARAGRAPHS)))
    rng.shuffle(order)
    out, n = [], 0
    for i in order:
        s = PARAGRAPHS[i].split(". ")
        k = rng.randrange(len(s))
        s = s[k:] + s[:k]
        p = ". ".join(x.rstrip(".") for x in s) + "."
        out.append(p)
        n += len(p) + 2
        if n >= chars:
            break
    return "\n\n".join(out)


def schedule(args):
    """[(t_offset_s, kind, messages)] from (seed, rate|burst): identical for every engine"""
    key = "burst:%d:%g" % (args.burst, args.burst_s) if args.burst else "rate:%g:%g" % (args.rate, args.duration)
    rng = random.Random("%d|%s" % (args.seed, key))
    if args.burst:
        times = sorted(rng.uniform(0, args.burst_s) for _ in range(args.burst))
    else:
        times, t = [], 0.0
        while True:
            t += rng.expovariate(args.rate)
            if t >= args.duration:
                break
            times.append(t)
    n = len(times)
    n_long = int(round(n * args.long_frac))
    kinds = ["long"] * n_long + ["short"] * (n - n_long)
    rng.shuffle(kinds)
    out = []
    for t, k in zip(times, kinds):
        if k == "long":
            msg = "Summarize this text:\n\n" + long_text(rng, args.long_chars)
        else:
            msg = rng.choice(QUESTIONS)
        out.append((t, k, [{"role": "user", "content": msg}]))
    return out


def pct(xs, p):
    """nearest-rank percentile (p in 0..100); None for no samples"""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(math.ceil(p / 100.0 * len(s))) - 1))]


async def one(client, model, i, t_sched, kind, messages, args, rec):
    rec.update(i=i, kind=kind, t_sched=t_sched, t_send=time.monotonic(), chunks=[], outcome="lost",
               status=None, error=None, finish=None, tokens=None, prompt_tokens=None, retry_after=None)
    try:
        stream = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=args.max_tokens, temperature=0.0, stream=True,
            stream_options={"include_usage": True})
        async for ch in stream:
            now = time.monotonic()
            for c in ch.choices or []:
                if c.delta is not None and c.delta.content:
                    rec["chunks"].append(now)
                if c.finish_reason:
                    rec["finish"] = c.finish_reason
            u = getattr(ch, "usage", None)
            if u is not None:
                rec["tokens"] = u.completion_tokens
                rec["prompt_tokens"] = u.prompt_tokens
        rec["t_end"] = time.monotonic()
        if rec["finish"]:
            rec["outcome"] = "ok"
        else:
            rec["error"] = "stream ended without a finish_reason"
    except asyncio.CancelledError:
        rec["error"] = "time limit (%gs)" % args.timeout
        rec["t_end"] = time.monotonic()
        raise
    except Exception as e:  # never let one request stop the run
        import openai
        rec["t_end"] = time.monotonic()
        rec["error"] = ("%s: %s" % (type(e).__name__, e))[:300]
        if rec["chunks"]:
            return                      # cut after content: lost
        if isinstance(e, openai.APIStatusError):
            rec["outcome"] = "refused"
            rec["status"] = str(e.status_code)
            try:
                rec["retry_after"] = e.response.headers.get("retry-after")
            except Exception:
                pass
        elif isinstance(e, openai.APIError) and not isinstance(e, openai.APIConnectionError):
            # an error event inside a stream the server had answered 200: its refusal, sent late
            body = e.body if isinstance(e.body, dict) else {}
            rec["outcome"] = "refused"
            rec["status"] = "200+error" + (" %s" % (body.get("code") or body.get("type")) if body else "")


async def guarded(client, model, i, t_sched, kind, messages, args, rec):
    try:
        await asyncio.wait_for(one(client, model, i, t_sched, kind, messages, args, rec), args.timeout)
    except asyncio.TimeoutError:
        rec["outcome"] = "lost"
        rec["error"] = "time limit (%gs)" % args.timeout
        rec.setdefault("t_end", time.monotonic())
    except BaseException as e:  # noqa: B902 — the record says what happened; the run goes on
        rec["outcome"] = "lost"
        rec["error"] = ("%s: %s" % (type(e).__name__, e))[:300]


def make_client(args, n):
    import openai
    kw = dict(base_url=args.url, api_key="unused", timeout=args.timeout, max_retries=0)
    if n > 900:  # the package's default pool holds 1000 connections
        try:
            try:
                import httpx2 as hx
            except ImportError:
                import httpx as hx
            kw["http_client"] = openai.DefaultAsyncHttpxClient(
                limits=hx.Limits(max_connections=n + 100, max_keepalive_connections=100), timeout=args.timeout)
        except Exception as e:
            print("serve_load: could not widen the connection pool (%s); requests may wait for one" % e,
                  file=sys.stderr)
    return openai.AsyncOpenAI(**kw)


async def run_load(args):
    sched = schedule(args)
    client = make_client(args, len(sched))
    model = args.model_id
    if not model:
        try:
            ms = await client.models.list()
            model = ms.data[0].id
        except Exception as e:
            model = "default"
            print("serve_load: /v1/models failed (%s); sending model=%r" % (e, model), file=sys.stderr)
    recs = [dict() for _ in sched]
    tasks = []
    t0 = time.monotonic()
    for i, (t, kind, msgs) in enumerate(sched):
        d = t0 + t - time.monotonic()
        if d > 0:
            await asyncio.sleep(d)
        tasks.append(asyncio.create_task(guarded(client, model, i, t0 + t, kind, msgs, args, recs[i])))
    if tasks:
        await asyncio.wait(tasks, timeout=args.timeout + 30)
    for tk in tasks:
        if not tk.done():
            tk.cancel()
    try:
        await client.close()
    except Exception:
        pass
    return t0, model, recs


def summarize(recs, t0):
    ok = [r for r in recs if r.get("outcome") == "ok"]
    ttft = [r["chunks"][0] - r["t_send"] for r in ok if r["chunks"]]
    gaps = [b - a for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    e2e = [r["t_end"] - r["t_send"] for r in ok]
    lag = [r["t_send"] - r["t_sched"] for r in recs if "t_send" in r]
    toks = sum((r["tokens"] if r.get("tokens") is not None else len(r["chunks"])) for r in ok)
    end = max([r["t_end"] for r in recs if r.get("t_end")] or [t0])
    start = min([r["t_send"] for r in recs if "t_send" in r] or [t0])
    refused, lost, why = {}, {}, {}
    for r in recs:
        if r.get("outcome") == "refused":
            k = str(r["status"]) + (" Retry-After %s" % r["retry_after"] if r.get("retry_after") else "")
            refused[k] = refused.get(k, 0) + 1
            why.setdefault(k, r.get("error"))
        elif r.get("outcome") != "ok":
            k = (r.get("error") or "unknown").split(":")[0]
            lost[k] = lost.get(k, 0) + 1
            why.setdefault(k, r.get("error"))
    q = lambda xs: {"p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99), "max": pct(xs, 100),
                    "n": len(xs)}
    ptok = lambda kind: [r["prompt_tokens"] for r in ok if r["kind"] == kind and r.get("prompt_tokens")]
    usage_ok = sum(1 for r in ok if r.get("tokens") is not None)
    return {
        "sent": len(recs), "long": sum(1 for r in recs if r.get("kind") == "long"),
        "ok": len(ok), "refused": sum(refused.values()), "lost": sum(lost.values()),
        "refused_by_status": refused, "lost_by_kind": lost, "first_error": why,
        "ttft_s": q(ttft), "itl_s": q(gaps), "e2e_s": q(e2e),
        "ttft_long_s": q([r["chunks"][0] - r["t_send"] for r in ok if r["chunks"] and r["kind"] == "long"]),
        "ttft_short_s": q([r["chunks"][0] - r["t_send"] for r in ok if r["chunks"] and r["kind"] == "short"]),
        "output_tokens": toks, "span_s": end - start, "tokens_per_s": toks / (end - start) if end > start else 0.0,
        "tokens_from": "usage" if ok and usage_ok == len(ok) else "chunks" if usage_ok == 0 else "mixed",
        "chunks_per_token": (sum(len(r["chunks"]) for r in ok) / toks) if toks else None,
        "prompt_tokens_long_mean": (sum(ptok("long")) / len(ptok("long"))) if ptok("long") else None,
        "prompt_tokens_short_mean": (sum(ptok("short")) / len(ptok("short"))) if ptok("short") else None,
        "send_lag_s": q(lag),
        "finish_reasons": {f: sum(1 for r in ok if r["finish"] == f) for f in sorted({r["finish"] for r in ok})},
    }


def cmd_run(args):
    if not args.burst and not (args.rate and args.rate > 0):
        sys.exit("serve_load run: give --rate R (> 0) or --burst N")
    try:
        import openai  # noqa: F401
    except ImportError:
        sys.exit("serve_load: the `openai` package is missing: python3 -m pip install openai")
    import resource
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0, model, recs = asyncio.run(run_load(args))
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    s = summarize(recs, t0)
    s["client_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)  # the driver's own share
    for r in recs:  # times relative to the run's start, in seconds
        for k in ("t_sched", "t_send", "t_end"):
            if r.get(k) is not None:
                r[k] = round(r[k] - t0, 6)
        r["chunks"] = [round(c - t0, 6) for c in r.get("chunks", [])]
    meta = {"engine": args.engine, "model": os.path.basename(args.model_file or model), "model_id": model,
            "mode": "burst" if args.burst else "rate", "rate": args.rate if not args.burst else None,
            "burst": args.burst or None, "burst_s": args.burst_s if args.burst else None,
            "duration_s": args.duration if not args.burst else None, "round": args.round, "seed": args.seed,
            "max_tokens": args.max_tokens, "timeout_s": args.timeout, "url": args.url,
            "extra": json.loads(args.extra) if args.extra else None}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "summary": s, "requests": recs}, f)
    ms = lambda v: "-" if v is None else "%.0f" % (v * 1e3)
    print("serve_load: %s %s %s round %d: sent %d ok %d refused %d lost %d, TTFT p50/p99 %s/%s ms, "
          "ITL p50/p99 %s/%s ms, %.1f tok/s; client CPU %.1f s" % (
              args.engine, meta["model"], "burst %d/%gs" % (args.burst, args.burst_s) if args.burst
              else "%g req/s" % args.rate, args.round, s["sent"], s["ok"], s["refused"], s["lost"],
              ms(s["ttft_s"]["p50"]), ms(s["ttft_s"]["p99"]), ms(s["itl_s"]["p50"]), ms(s["itl_s"]["p99"]),
              s["tokens_per_s"], s["client_cpu_s"]), file=sys.stderr)
    if s["send_lag_s"]["max"] is not None and s["send_lag_s"]["max"] > 0.05:
        print("serve_load: warning: a request was sent %.0f ms after its time (the client's loop was busy)"
              % (s["send_lag_s"]["max"] * 1e3), file=sys.stderr)


def cmd_report(args):
    runs = []
    for p in args.runs:
        with open(p) as f:
            j = json.load(f)
        runs.append({"meta": j["meta"], "summary": j["summary"]})
    ms = lambda v: "-" if v is None else "%.0f" % (v * 1e3) if v >= 0.01 else "%.1f" % (v * 1e3)
    fmt_d = lambda d: ", ".join("%s x%d" % (k, v) for k, v in sorted(d.items())) or "-"
    order = lambda r: (r["meta"]["model"], r["meta"]["mode"], r["meta"]["rate"] or 0, r["meta"]["burst"] or 0,
                       r["meta"]["round"], r["meta"]["engine"])
    runs.sort(key=order)
    cols = ["engine", "model", "load", "round", "sent", "ok", "refused", "lost", "TTFT p50 ms", "TTFT p99 ms",
            "ITL p50 ms", "ITL p99 ms", "ITL max ms", "out tok/s", "refused by status", "lost by kind"]
    rows = []
    for r in runs:
        m, s = r["meta"], r["summary"]
        if m["mode"] != "rate":
            continue
        load = "%g req/s x %gs" % (m["rate"], m["duration_s"])
        rows.append([m["engine"], m["model"], load, m["round"], s["sent"], s["ok"], s["refused"], s["lost"],
                     ms(s["ttft_s"]["p50"]), ms(s["ttft_s"]["p99"]), ms(s["itl_s"]["p50"]), ms(s["itl_s"]["p99"]),
                     ms(s["itl_s"]["max"]), "%.1f" % s["tokens_per_s"], fmt_d(s["refused_by_status"]),
                     fmt_d(s["lost_by_kind"])])
    if rows:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in rows:
            print("| " + " | ".join(str(x) for x in row) + " |")
    # goodput: per engine and model, over the rate runs
    good = {}
    by = {}
    for r in runs:
        m, s = r["meta"], r["summary"]
        if m["mode"] != "rate":
            continue
        t99, i99 = s["ttft_s"]["p99"], s["itl_s"]["p99"]
        ok = (s["sent"] > 0 and s["ok"] >= 0.99 * s["sent"] and t99 is not None and t99 <= args.ttft_slo
              and (i99 is None or i99 <= args.itl_slo))
        k = (m["engine"], m["model"])
        by.setdefault(k, {}).setdefault(m["rate"], []).append(ok)
    for k, rates in by.items():
        passing = [rt for rt, oks in rates.items() if all(oks)]
        good[k] = {"goodput_req_s": max(passing) if passing else 0.0,
                   "rates": {str(rt): {"pass_rounds": sum(oks), "rounds": len(oks)} for rt, oks in sorted(rates.items())}}
    if good:
        print()
        print("Goodput: the highest rate (req/s) at which every round kept TTFT p99 <= %g s, inter-token p99 "
              "<= %g ms and served >= 99%% of requests" % (args.ttft_slo, args.itl_slo * 1e3))
        print()
        print("| model | engine | goodput req/s | rates passed (rounds) |")
        print("|---|---|---|---|")
        for k in sorted(good, key=lambda k: (k[1], k[0])):
            g = good[k]
            passed = ", ".join("%s: %d/%d" % (rt, v["pass_rounds"], v["rounds"]) for rt, v in g["rates"].items())
            print("| %s | %s | %g | %s |" % (k[1], k[0], g["goodput_req_s"], passed))
    bursts = [r for r in runs if r["meta"]["mode"] == "burst"]
    if bursts:
        print()
        print("Bursts: served = streams that finished; refused = an HTTP error status, or an error event before "
              "any content; lost = no answer, connection error, time limit, an error after content or a stream "
              "cut without a finish_reason")
        print()
        print("| engine | model | burst | round | served | refused (status) | lost (kind) | TTFT p50 ms | "
              "TTFT p99 ms | ITL p50 ms | ITL p99 ms | ITL max ms |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in bursts:
            m, s = r["meta"], r["summary"]
            print("| %s | %s | %d in %gs | %d | %d | %d (%s) | %d (%s) | %s | %s | %s | %s | %s |" % (
                m["engine"], m["model"], m["burst"], m["burst_s"], m["round"], s["ok"], s["refused"],
                fmt_d(s["refused_by_status"]), s["lost"], fmt_d(s["lost_by_kind"]), ms(s["ttft_s"]["p50"]),
                ms(s["ttft_s"]["p99"]), ms(s["itl_s"]["p50"]), ms(s["itl_s"]["p99"]), ms(s["itl_s"]["max"])))
    seen = {}
    for r in runs:
        for k, msg in r["summary"].get("first_error", {}).items():
            seen.setdefault((r["meta"]["engine"], k), msg)
    if seen:
        print()
        print("Errors (the first message of each kind):")
        for (e, k), msg in sorted(seen.items()):
            print("- %s, %s: %s" % (e, k, msg))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            qs = ["p50", "p90", "p99", "max"]
            w.writerow(["engine", "model", "mode", "rate", "burst", "burst_s", "duration_s", "round", "seed", "sent",
                        "long", "ok", "refused", "lost"] + ["ttft_%s_s" % x for x in qs] + ["itl_%s_s" % x for x in qs]
                       + ["e2e_%s_s" % x for x in qs] + ["tokens_per_s", "output_tokens", "tokens_from",
                                                         "prompt_tokens_long_mean", "send_lag_max_s", "client_cpu_s",
                                                         "refused_by_status", "lost_by_kind"])
            for r in runs:
                m, s = r["meta"], r["summary"]
                w.writerow([m["engine"], m["model"], m["mode"], m["rate"], m["burst"], m["burst_s"], m["duration_s"],
                            m["round"], m["seed"], s["sent"], s["long"], s["ok"], s["refused"], s["lost"]]
                           + [s["ttft_s"][x] for x in qs] + [s["itl_s"][x] for x in qs] + [s["e2e_s"][x] for x in qs]
                           + [s["tokens_per_s"], s["output_tokens"], s["tokens_from"], s["prompt_tokens_long_mean"],
                              s["send_lag_s"]["max"], s.get("client_cpu_s"), json.dumps(s["refused_by_status"]), json.dumps(s["lost_by_kind"])])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"slo": {"ttft_p99_s": args.ttft_slo, "itl_p99_s": args.itl_slo, "served_frac": 0.99},
                       "runs": runs,
                       "goodput": [dict(engine=k[0], model=k[1], **v) for k, v in sorted(good.items())]}, f, indent=1)


def cmd_texts(args):
    rng = random.Random(args.seed)
    for _ in range(args.n):
        print(long_text(rng, args.long_chars))
        print("-" * 72)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8080/v1")
    r.add_argument("--out", required=True)
    r.add_argument("--engine", default="server")
    r.add_argument("--model-file", default="")
    r.add_argument("--model-id", default="", help="the model field to send (default: the first of /v1/models)")
    r.add_argument("--rate", type=float, default=0.0)
    r.add_argument("--duration", type=float, default=60.0)
    r.add_argument("--burst", type=int, default=0)
    r.add_argument("--burst-s", type=float, default=4.0)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--round", type=int, default=1)
    r.add_argument("--timeout", type=float, default=120.0)
    r.add_argument("--max-tokens", type=int, default=64)
    r.add_argument("--long-frac", type=float, default=0.25)
    r.add_argument("--long-chars", type=int, default=4800)
    r.add_argument("--extra", default="", help="JSON kept in the run's meta (the server's flags, ...)")
    p = sub.add_parser("report")
    p.add_argument("runs", nargs="+")
    p.add_argument("--csv")
    p.add_argument("--json")
    p.add_argument("--ttft-slo", type=float, default=2.0)
    p.add_argument("--itl-slo", type=float, default=0.1)
    t = sub.add_parser("texts")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--n", type=int, default=4)
    t.add_argument("--long-chars", type=int, default=4800)
    a = ap.parse_args()
    {"run": cmd_run, "report": cmd_report, "texts": cmd_texts}[a.cmd](a)


if __name__ == "__main__":
    main()
