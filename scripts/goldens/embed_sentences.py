"""The inputs of the embedding goldens (scripts/goldens/embed.py for
llama.cpp, scripts/goldens/embed_st.py for sentence-transformers)."""

# decoder models: each pooling on these
SHORT = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "Quantum computers use qubits that can be in superpositions of states.",
    "How do I bake sourdough bread at home?",
    "Stock markets fell sharply after the central bank raised interest rates.",
]

# the BERT sentence encoder: its own pooling on these (>= 50)
SENTENCES = SHORT + [
    "A man is playing a guitar on the street corner.",
    "Two children are building a sandcastle at the beach.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The train to Edinburgh leaves at 7:45 from platform 3.",
    "She finished the marathon in under four hours!",
    "Can you recommend a good book about the history of Rome?",
    "The server returned HTTP 503 because the upstream service was unavailable.",
    "Our quarterly revenue grew 12% year over year.",
    "It rained all weekend, so we stayed inside and played board games.",
    "The mitochondria is the powerhouse of the cell.",
    "Don't forget to water the plants while I'm away.",
    "Café au lait is coffee with hot milk, popular in France.",
    "The telescope detected a faint signal from a distant galaxy.",
    "Please reset your password using the link in the email.",
    "Lions hunt in groups called prides.",
    "The committee postponed its decision until next Tuesday.",
    "He spilled coffee on his laptop keyboard this morning.",
    "Vaccines train the immune system to recognise pathogens.",
    "The bridge was closed for repairs after the storm.",
    "A violinist performed Bach's partitas to a packed hall.",
    "Electric cars are becoming cheaper to own than petrol cars.",
    "What time does the pharmacy open on Sundays?",
    "The ancient library of Alexandria held thousands of scrolls.",
    "Machine learning models can overfit when trained on small datasets.",
    "The kitten chased a ball of yarn across the living room.",
    "Glaciers are retreating faster than scientists predicted.",
    "I need to buy eggs, milk, and bread from the grocery store.",
    "The football match ended in a 2-2 draw after extra time.",
    "Rust's borrow checker prevents data races at compile time.",
    "The museum's new exhibit features Impressionist paintings.",
    "Honeybees communicate the location of flowers through a waggle dance.",
    "The flight was delayed by three hours due to fog.",
    "A balanced diet includes fruits, vegetables, and whole grains.",
    "The startup raised $20 million in its Series B round.",
    "Volcanic eruptions can cool the global climate for years.",
    "My grandmother knits scarves for everyone in the family.",
    "The judge ruled that the evidence was inadmissible.",
    "Sound travels faster in water than in air.",
    "The hikers reached the summit just before sunset.",
    "Database indexes speed up queries at the cost of slower writes.",
    "A dog is running through a field of tall grass.",
    "The orchestra tuned their instruments before the concert began.",
    "Solar panels convert sunlight directly into electricity.",
    "He apologised for arriving late to the meeting.",
    "The chef seasoned the soup with thyme and black pepper.",
    "UNESCO lists the Great Barrier Reef as a World Heritage Site.",
    "The printer on the second floor is out of toner again.",
    "Tides are caused mainly by the gravitational pull of the Moon.",
    "She translated the novel from Japanese into English.",
    "Heavy traffic slowed the morning commute across the city.",
]

# retrieval: each query's documents ranked by cosine
QUERIES = [
    "How do plants make food from sunlight?",
    "Which pet likes to play with yarn?",
    "Why was my flight late?",
]
DOCUMENTS = [
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The kitten chased a ball of yarn across the living room.",
    "The flight was delayed by three hours due to fog.",
    "Database indexes speed up queries at the cost of slower writes.",
    "Solar panels convert sunlight directly into electricity.",
    "Lions hunt in groups called prides.",
    "Heavy traffic slowed the morning commute across the city.",
    "The train to Edinburgh leaves at 7:45 from platform 3.",
]
