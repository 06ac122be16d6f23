"""Our own prompt set for distilling the draft: written here, generated deterministically.

Phase 1 prompts are instructions, questions, coding, writing and reasoning tasks built
from templates and word lists. Phase 2 prompts are built from the target's own phase-1
answers: multi-turn chats (the target's answer, then a follow-up) and long "summarize this
text" prompts whose texts the target wrote. Every prompt carries its split; a phase-2
prompt inherits the split of the phase-1 prompt it came from, so no held-out text is ever
seen in training, not even as context.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

HELD_OUT_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str  # stable: kind + index, e.g. "coding-0042"
    kind: str  # instruction, question, coding, writing, reasoning, article, chat, summarize
    messages: tuple[tuple[str, str], ...]  # (role, content) turns, the last one a user turn
    split: str  # "train" or "heldout"
    sampled: bool  # continue by sampling at temperature 1 (else greedy)
    max_new: int  # continuation tokens at most


TOPICS = [
    "photosynthesis", "the water cycle", "black holes", "the French Revolution", "volcanoes",
    "honeybees", "the human heart", "climate change", "the printing press", "electric cars",
    "the Roman Empire", "coral reefs", "vaccines", "the internet", "earthquakes",
    "the Moon landing", "renewable energy", "the immune system", "ancient Egypt", "rainforests",
    "compound interest", "the stock market", "sleep", "coffee", "chess", "jazz music",
    "the Olympic Games", "plate tectonics", "DNA", "the Great Wall of China", "penguins",
    "solar panels", "recycling", "the Industrial Revolution", "microplastics", "tea ceremonies",
    "the Amazon river", "glaciers", "bread baking", "public libraries", "trains", "bicycles",
    "the Renaissance", "octopuses", "lighthouses", "wind turbines", "deserts", "mushrooms",
    "the Silk Road", "satellites", "urban gardening", "the piano", "marathons", "origami",
    "hurricanes", "the periodic table", "migrating birds", "sourdough", "video games",
    "the Mars rovers", "clean drinking water", "the history of money", "volunteering",
]
ACTIVITIES = [
    "learning a new language", "running a first 5k", "studying for exams", "saving money",
    "starting a vegetable garden", "cooking for a large group", "working from home",
    "taking better photos", "reading more books", "keeping a houseplant alive",
    "preparing for a job interview", "staying focused", "travelling on a budget",
    "writing a cover letter", "learning to draw", "organizing a small kitchen",
    "making friends in a new city", "giving a presentation", "camping in the rain",
    "training a puppy", "reducing food waste", "learning to swim", "moving house",
]
PEOPLE = [
    "Marie Curie", "Albert Einstein", "Ada Lovelace", "Isaac Newton", "Leonardo da Vinci",
    "Nelson Mandela", "Charles Darwin", "Frida Kahlo", "Alan Turing", "Rosa Parks",
    "Galileo Galilei", "Jane Austen", "Nikola Tesla", "Cleopatra", "Mozart", "Confucius",
]
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the words in a text", "removes duplicates from a list while keeping order",
    "merges two sorted lists", "computes the average of a list of numbers",
    "finds the largest element in a list", "checks whether a string is a palindrome",
    "converts Celsius to Fahrenheit", "flattens a nested list", "reads a CSV file and sums a column",
    "validates an email address", "computes the factorial of n", "sorts a list of dictionaries by a key",
    "counts how often each character appears in a string", "returns the greatest common divisor of two numbers",
    "implements binary search", "transposes a matrix", "capitalizes the first letter of every word",
]
LANGUAGES = ["Python", "JavaScript", "C", "Rust", "Go", "Java", "SQL", "Bash"]
CODE_QUESTIONS = [
    "How do I read a file line by line in {lang}?", "How do I handle errors in {lang}?",
    "What is a closure? Show an example in {lang}.", "How do I write a loop over a list in {lang}?",
    "Explain recursion with an example in {lang}.", "How do I make an HTTP request in {lang}?",
    "What is the difference between a list and a dictionary in Python?",
    "Write a SQL query that finds the ten customers with the most orders.",
    "What does `git rebase` do, and when should I use it?", "Explain what a hash table is.",
    "What is Big O notation? Give three examples.", "How do I sort an array in {lang}?",
]
SNIPPETS = [
    "def f(xs):\n    return [x * x for x in xs if x % 2 == 0]",
    "total = 0\nfor i in range(1, 11):\n    total += i\nprint(total)",
    "def g(s):\n    return s == s[::-1]",
    "import collections\ncounts = collections.Counter(text.split())\nprint(counts.most_common(3))",
    "function add(a, b) {\n  return a + b;\n}\nconsole.log(add(2, 3));",
    "SELECT name, COUNT(*) FROM orders GROUP BY name ORDER BY 2 DESC;",
    "while n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1",
    "with open('data.txt') as fh:\n    lines = [line.strip() for line in fh]",
]
WRITING = [
    "Write a short poem about {topic}.", "Write a haiku about {topic}.",
    "Write a short story about a child who discovers {topic}.",
    "Write a friendly email to a colleague inviting them to a talk about {topic}.",
    "Write a product description for a board game about {topic}.",
    "Write a limerick about {topic}.", "Write the opening paragraph of a mystery novel set near {place}.",
    "Write a thank-you note to a teacher who taught you about {topic}.",
    "Write a tweet announcing a new podcast episode about {topic}.",
    "Write a motivational message for someone who is {activity}.",
]
PLACES = ["a lighthouse", "a mountain village", "a busy train station", "an old library",
          "a desert oasis", "a fishing harbour", "a space station", "a night market"]
INSTRUCTIONS = [
    "Give me five tips for {activity}.", "Explain step by step how to get started with {activity}.",
    "Make a one-week plan for {activity}.", "What are common mistakes people make when {activity}?",
    "List the pros and cons of {topic}.", "Describe {topic} in three sentences.",
    "Explain {topic} to a ten-year-old.", "Give me a checklist for {activity}.",
    "Suggest three fun facts about {topic}.", "Compare {topic} and {topic2} in a short table.",
]
QUESTIONS = [
    "What is {topic}?", "Why is {topic} important?", "How does {topic} work?",
    "What are the main causes and effects of {topic}?", "Who was {person}, and why are they famous?",
    "What is the history of {topic}?", "What would happen if {topic} disappeared?",
    "What are three questions scientists still ask about {topic}?",
    "What did {person} contribute to science or culture?", "Is {topic} good or bad? Discuss.",
]
ARTICLES = [
    "Write a detailed article of about 250 words about {topic}.",
    "Write an informative essay about {topic}, with an introduction and a conclusion.",
    "Write a blog post about your experience with {activity}.",
    "Write a news report about a new discovery related to {topic}.",
    "Write a biography of {person} in about 200 words.",
]
FOLLOW_UPS = [
    "Can you make that shorter?", "Thanks! Can you give me a concrete example?",
    "Explain that again for a ten-year-old.", "What is the most important point?",
    "Can you turn that into a bulleted list?", "Is there anything you left out?",
    "Why is that? Please explain your reasoning.", "Can you write that more formally?",
]
SUMMARIZE = [
    "Summarize this text in two sentences:\n\n{text}",
    "Summarize the following text:\n\n{text}",
    "Read the text below and list its three main points.\n\n{text}",
    "Write a one-paragraph summary of this article.\n\n{text}",
    "What is the main idea of this text?\n\n{text}",
]


def _reasoning(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 60), rng.randint(2, 30), rng.randint(2, 9)
    forms = [
        f"A train travels {a * c} km in {c} hours. What is its average speed? Show your steps.",
        f"Tom has {a} apples and gives {b % a or 1} to his friend. Then he buys {c} more. "
        "How many apples does he have now? Think step by step.",
        f"Is {a * 2 + 1} a prime number? Explain how you know.",
        f"A shirt costs {a} dollars and is discounted by {c * 5} percent. What is the new price?",
        f"If {c} workers build a wall in {b} days, how long would {c * 2} workers take? Explain.",
        f"What is {a} times {b}, minus {c}? Explain each step.",
        f"A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
        f"Sara is {b} years old. Her mother is {c} times as old. How old will her mother be in "
        f"{a % 10 + 1} years?",
        "If all bloops are razzies and all razzies are lazzies, are all bloops lazzies? Why?",
        f"Sort these numbers from smallest to largest: {a}, {b * 3}, {c * 7}, {a + b}, {b - c}.",
    ]
    return rng.choice(forms)


def _fill(template: str, rng: random.Random) -> str:
    topic, topic2 = rng.sample(TOPICS, 2)
    return template.format(topic=topic, topic2=topic2, activity=rng.choice(ACTIVITIES),
                           person=rng.choice(PEOPLE), place=rng.choice(PLACES),
                           lang=rng.choice(LANGUAGES))


def _coding(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.45:
        return f"Write a {rng.choice(LANGUAGES[:6])} function that {rng.choice(CODE_TASKS)}."
    if r < 0.75:
        return _fill(rng.choice(CODE_QUESTIONS), rng)
    return f"What does this code do?\n\n```\n{rng.choice(SNIPPETS)}\n```"


def _split(pid: str, seed: int) -> str:
    h = int.from_bytes(hashlib.sha256(f"{seed}:{pid}".encode()).digest()[:8], "big")
    return "heldout" if h / 2**64 < HELD_OUT_FRACTION else "train"


# kind -> (share of phase 1, max_new)
PHASE1 = {"instruction": (0.22, 160), "question": (0.22, 160), "coding": (0.18, 192),
          "writing": (0.14, 160), "reasoning": (0.12, 160), "article": (0.12, 256)}


def phase1(n: int, seed: int = 0) -> list[Prompt]:
    """n single-turn prompts; half greedy, half sampled, decided per prompt."""
    rng = random.Random(seed)
    out: list[Prompt] = []
    for kind, (share, max_new) in PHASE1.items():
        for i in range(max(1, round(n * share))):
            if kind == "coding":
                text = _coding(rng)
            elif kind == "reasoning":
                text = _reasoning(rng)
            else:
                pool = {"instruction": INSTRUCTIONS, "question": QUESTIONS, "writing": WRITING,
                        "article": ARTICLES}[kind]
                text = _fill(rng.choice(pool), rng)
            pid = f"{kind}-{i:04d}"
            # articles are read back in phase 2: greedy keeps them on the target's mode
            sampled = kind != "article" and rng.random() < 0.5
            out.append(Prompt(pid, kind, (("user", text),), _split(pid, seed), sampled, max_new))
    return out


def phase2(answers: dict[str, tuple[Prompt, str]], seed: int = 0,
           max_text_chars: int = 1600) -> list[Prompt]:
    """Multi-turn chats and summarize prompts from the target's phase-1 answers
    (prompt id -> (prompt, answer text)). Articles become texts to summarize; other answers
    get a follow-up turn."""
    rng = random.Random(seed + 1)
    out: list[Prompt] = []
    for pid in sorted(answers):
        p, text = answers[pid]
        text = text.strip()
        if len(text) < 80:
            continue
        if p.kind == "article":
            body = text[:max_text_chars]
            msg = rng.choice(SUMMARIZE).format(text=body)
            out.append(Prompt(f"summarize-{pid}", "summarize", (("user", msg),), p.split,
                              rng.random() < 0.5, 160))
        elif rng.random() < 0.35:
            turns = p.messages + (("assistant", text), ("user", rng.choice(FOLLOW_UPS)))
            out.append(Prompt(f"chat-{pid}", "chat", turns, p.split, rng.random() < 0.5, 160))
    return out
