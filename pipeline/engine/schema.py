"""The flat "request frame": one row per decision request, one column per request field.

Every path into the engine (a JSON body, a spreadsheet row) becomes a row of this frame, so
validation and scoring exist once, as polars expressions over these columns.
"""

import polars as pl

PROPERTY_TYPES: tuple[str, ...] = ("apartment", "villa", "land", "commercial", "office")

REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "type": pl.String(),
    "price": pl.Float64(),
    "area": pl.Float64(),
    "bedrooms": pl.Float64(),
    "bathrooms": pl.Float64(),
    "floor": pl.Float64(),
    "age": pl.Float64(),
    "parking": pl.Boolean(),
    "furnished": pl.Boolean(),
    "city": pl.String(),
    "district": pl.String(),
    "lat": pl.Float64(),
    "lng": pl.Float64(),
    "reasoning": pl.Boolean(),
}

# Column of the request frame -> dotted path of the field in the spec's request body.
FIELD_PATHS: dict[str, str] = {
    "type": "property.type",
    "price": "property.price",
    "area": "property.area",
    "bedrooms": "property.bedrooms",
    "bathrooms": "property.bathrooms",
    "floor": "property.floor",
    "age": "property.age",
    "parking": "property.parking",
    "furnished": "property.furnished",
    "city": "location.city",
    "district": "location.district",
    "lat": "location.lat",
    "lng": "location.lng",
    "reasoning": "reasoning",
}

PROPERTY_FIELDS = tuple(c for c, p in FIELD_PATHS.items() if p.startswith("property."))
LOCATION_FIELDS = tuple(c for c, p in FIELD_PATHS.items() if p.startswith("location."))

# The figures of the response's `benchmark` object; column `benchmark_<name>` of a scored frame.
BENCHMARK_FIELDS: tuple[str, ...] = (
    "median_sqm", "p25_sqm", "p75_sqm", "year", "transaction_count", "yoy_pct",
)  # fmt: skip
