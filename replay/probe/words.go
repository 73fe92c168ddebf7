package probe

// words are the common lowercase English words copy probes and JSON string
// values are made of: short, each a whole word a tokenizer knows, so that a
// probe tests the serving path rather than the model's spelling.
var words = [...]string{
	"able", "acid", "also", "area", "army", "away", "baby", "back", "ball", "band",
	"bank", "base", "bath", "bear", "bell", "belt", "best", "bird", "blue", "boat",
	"body", "bone", "book", "born", "both", "bowl", "brown", "busy", "cake", "call",
	"calm", "camp", "card", "care", "case", "cash", "cell", "chair", "cheap", "chest",
	"child", "city", "clay", "clean", "clock", "cloud", "coal", "coat", "cold", "color",
	"corn", "cost", "crowd", "dark", "date", "dawn", "deal", "deep", "desk", "dish",
	"door", "down", "draw", "dream", "dress", "drink", "drive", "drop", "duck", "dust",
	"early", "earth", "east", "easy", "edge", "empty", "engine", "even", "event", "face",
	"fact", "fair", "farm", "fast", "field", "film", "fire", "fish", "flag", "flat",
	"floor", "food", "foot", "fork", "form", "fresh", "friend", "frog", "fruit", "full",
	"game", "gate", "gift", "girl", "glad", "glass", "goat", "gold", "good", "grass",
	"green", "ground", "group", "hair", "half", "hall", "hand", "hard", "head", "heart",
	"heavy", "hill", "home", "hope", "horse", "house", "idea", "iron", "island", "jump",
	"key", "kind", "king", "lake", "lamp", "land", "large", "late", "leaf", "left",
	"lemon", "light", "line", "lion", "list", "long", "loud", "low", "lunch", "map",
	"market", "metal", "milk", "mind", "moon", "morning", "mouse", "music", "name", "near",
	"neck", "nest", "night", "north", "nose", "note", "ocean", "office", "open", "orange",
	"page", "paint", "paper", "park", "party", "path", "pencil", "pink", "plant", "plate",
	"pocket", "quick", "quiet", "rain", "red", "river", "road", "rock", "roof", "room",
	"salt", "sand", "school", "sea", "seed", "ship", "short", "silver", "sky", "sleep",
}

// fieldNames are the keys of json-field probes' objects.
var fieldNames = [...]string{
	"id", "name", "city", "color", "status", "count", "owner", "region",
	"score", "level", "label", "country", "price", "size", "weight", "code",
	"title", "category", "rank", "year", "team", "animal", "fruit", "tag",
}
