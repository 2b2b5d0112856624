"""Answers CORS itself, as Supabase's functions do with their corsHeaders."""

CORS = {"Access-Control-Allow-Origin": "https://only.example.com", "Access-Control-Allow-Headers": "x-own"}


def handler(request, caller):
    if request.method == "OPTIONS":
        return "ok", CORS
    return {"role": caller.role}, CORS
