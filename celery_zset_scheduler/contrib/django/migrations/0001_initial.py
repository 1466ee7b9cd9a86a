# The unmanaged models of the admin pages: no tables, only content types and permissions.

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name='DeadLetter',
            fields=[
                ('id', models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'verbose_name': 'dead letter',
                'verbose_name_plural': 'dead letters',
                'managed': False,
                'default_permissions': ('view', 'change'),
            },
        ),
        migrations.CreateModel(
            name='Overview',
            fields=[
                ('id', models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'verbose_name': 'overview',
                'verbose_name_plural': 'overview',
                'managed': False,
                'default_permissions': ('view',),
            },
        ),
        migrations.CreateModel(
            name='ScheduledTask',
            fields=[
                ('id', models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'verbose_name': 'scheduled task',
                'verbose_name_plural': 'scheduled tasks',
                'managed': False,
                'default_permissions': ('view', 'change'),
            },
        ),
    ]
