"""The kinds of request users bring, for `--data magpie` and for validation by kind.

`HINTS`: a few system prompts per kind that steer the target when it writes its own user
prompts (magpie.py). `HELD_OUT`: prompts per kind written here, never trained on (magpie
drops any generated prompt that matches or nearly matches one), on which `specdec train`
measures teacher-forced top-1 and real τ per kind (validation.py).
"""

from __future__ import annotations

KINDS = ("writing", "coding", "maths", "extraction", "role-play", "summarisation", "qa")

HINTS: dict[str, tuple[str, ...]] = {
    "writing": (
        "You are a writing assistant. Users ask you to write stories, poems, letters and essays.",
        "You help people write: emails, speeches, product descriptions and blog posts.",
        "You are a creative writing tutor. Users ask for short fiction on a theme they choose.",
    ),
    "coding": (
        "You are a programming assistant. Users ask you to write, explain or fix code.",
        "You answer questions about Python, JavaScript, SQL and shell scripts, with code.",
        "You are a senior software engineer. Users ask you to implement small functions.",
    ),
    "maths": (
        "You are a maths tutor. Users ask you to solve word problems step by step.",
        "You help students with arithmetic, algebra, percentages and geometry questions.",
        "You solve quantitative problems: prices, ages, distances, rates and probabilities.",
    ),
    "extraction": (
        "You extract information. Users paste a text and ask for names, dates or numbers from it.",
        "You turn messy text into structured data: lists, tables and JSON.",
        "Users give you a passage and ask you to find specific facts in it.",
    ),
    "role-play": (
        "You play characters. Users ask you to act as a person, a job or a fictional character.",
        "You are a role-play partner: users set a scene and ask you to stay in character.",
        "Users ask you to pretend to be an interviewer, a customer, a teacher or a guide.",
    ),
    "summarisation": (
        "You summarise. Users paste an article, a report or a conversation and ask for a summary.",
        "You condense long texts into a few sentences or bullet points.",
        "Users give you a news story and ask for its main points.",
    ),
    "qa": (
        "You answer factual questions about history, science, geography and culture.",
        "You answer short general-knowledge questions clearly and correctly.",
        "Users ask you who, what, when and where questions about the world.",
    ),
}

HELD_OUT: dict[str, tuple[str, ...]] = {
    "writing": (
        "Write a four-line poem about a lighthouse keeper who has never seen the sea in daylight.",
        "Draft a polite email to a neighbour asking them to trim the hedge between our gardens.",
        "Write the opening paragraph of a mystery story set on a night train through the Alps.",
    ),
    "coding": (
        "Write a Python function that returns the longest palindromic substring of a string.",
        "Explain what this shell command does: find . -name '*.log' -mtime +7 -delete",
        "Write a SQL query that lists each customer with the total of their orders in 2023.",
    ),
    "maths": (
        "A shop sells pens at 3 for $2. How much do 27 pens cost, and how many can I buy with $15?",
        "A train leaves at 9:40 and travels 210 km at 84 km/h. When does it arrive?",
        "The sum of three consecutive even numbers is 138. What are the numbers?",
    ),
    "extraction": (
        "From this note, list every date and what happens on it: 'Kick-off on 3 March, "
        "design review 17 March, launch on 2 April, retrospective the week after.'",
        "Extract the names and job titles as JSON: 'Maria Lopez, our CFO, met Tom Baker "
        "(head of sales) and the intern, Priya Shah.'",
        "Which cities are mentioned here, and in which country is each? 'We flew from Lyon to "
        "Porto, then took the bus to Seville.'",
    ),
    "role-play": (
        "Pretend you are a museum guide in ancient Rome and welcome me to the Colosseum.",
        "Act as a job interviewer for a junior data analyst role and ask me your first question.",
        "You are a grumpy dragon guarding a bridge. I want to cross. What do you say?",
    ),
    "summarisation": (
        "Summarise in two sentences: The town council met on Tuesday to discuss the new "
        "cycle lanes. Residents complained about lost parking, while shop owners reported "
        "more customers since the trial began. The council will vote next month after a "
        "public survey.",
        "Give the main points of this update: Sales rose 8% in the third quarter, mostly "
        "from online orders. Costs grew faster because of shipping, so profit fell slightly. "
        "The company plans to open two warehouses next year.",
        "Summarise this exchange: A asked whether the report could be late; B said Friday "
        "was the latest; A promised a draft by Thursday and B agreed to review it that "
        "evening.",
    ),
    "qa": (
        "Why do we have leap years?",
        "Who painted the ceiling of the Sistine Chapel, and how long did it take?",
        "What is the difference between weather and climate?",
    ),
}


def held_out_prompts() -> list[str]:
    """Every held-out prompt of every kind."""
    return [text for kind in KINDS for text in HELD_OUT[kind]]
